"""The grader's memory meter in the grading child: tracemalloc, which the code it measures cannot reset.

While a measured case runs, the grading child traces every allocation with
:mod:`tracemalloc` (NumPy reports its array buffers there).  The code being
measured can reach tracemalloc's controls only through course code (graded code
may not import it: :mod:`shared.policy`), for instance the helper's own
``measure_peak_memory``, which resets the peak for its own measurement.  So while
the grader measures, tracemalloc's controls are replaced:

- ``reset_peak()`` first banks the peak so far, then resets (a nested
  measurement still gets its own peak, and the grader's is not lost);
- ``stop()``, ``clear_traces()`` and ``start()`` do nothing (tracing goes on);

and the grader's peak is the largest of the banked peaks and the last one.  The
originals are kept in this module, which graded code cannot import.
"""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

_start = tracemalloc.start
_stop = tracemalloc.stop
_reset_peak = tracemalloc.reset_peak
_clear_traces = tracemalloc.clear_traces
_is_tracing = tracemalloc.is_tracing
_traced = tracemalloc.get_traced_memory
_CONTROLS = ("start", "stop", "reset_peak", "clear_traces")


class Meter:
    """``with Meter() as meter: call()``, then ``meter.peak_bytes`` and ``meter.kept_bytes``.

    peak_bytes: the most traced memory above the level before the call, at any moment;
    kept_bytes: what is still traced after the call and a garbage collection (what the
    result keeps alive).
    """

    def __init__(self) -> None:
        self.banked = 0
        self.before = 0
        self.peak_bytes: int | None = None
        self.kept_bytes: int | None = None
        self._saved: dict[str, Any] = {}

    def _banking_reset_peak(self) -> None:
        self.banked = max(self.banked, _traced()[1])
        _reset_peak()

    def __enter__(self) -> "Meter":
        gc.collect()
        if not _is_tracing():
            _start()
        self._saved = {name: getattr(tracemalloc, name) for name in _CONTROLS}
        tracemalloc.reset_peak = self._banking_reset_peak
        tracemalloc.stop = tracemalloc.clear_traces = tracemalloc.start = _nothing
        _reset_peak()
        self.before = _traced()[0]
        return self

    def __exit__(self, *exc: Any) -> None:
        peak = max(self.banked, _traced()[1])
        self.peak_bytes = peak - self.before
        gc.collect()  # what the result keeps alive, not garbage that waits for the collector
        self.kept_bytes = _traced()[0] - self.before
        for name, value in self._saved.items():
            setattr(tracemalloc, name, value)
        _stop()


def _nothing(*args: Any, **kwargs: Any) -> None:
    """tracemalloc's start, stop and clear_traces while the grader measures."""
    return None
