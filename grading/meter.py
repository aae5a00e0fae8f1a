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

And what the notebook made before the call is not the call's to write: work done in an array made earlier (a
global, a default argument, a cache, a closure's) allocates nothing while it is measured, so a call could do its
work in memory neither measure sees (the whole batch at once in a 64 MiB array made at the top level of its cell:
found by a red team).  Before each measured call, :func:`freeze_made_before` makes every array the notebook can
reach read-only (in the grading child only: the notebook's own arrays are untouched), so such a call raises, and
the judge says why.

Two more checks stand on more than the rules for graded code:

- *the trace was whole*: a small object allocated when the measurement starts must still
  be traced when it ends, and tracing still on (tracing stopped, restarted or cleared by
  any means loses both), else ``trace_kept`` is False and the judge gives no points;
- *a second measure, out of Python's reach*: the process's peak resident memory
  (``VmHWM`` of ``/proc/self/status``, reset by writing 5 to ``/proc/self/clear_refs``
  when the measurement starts), which no Python code changes: ``resident_peak_bytes``.
  Less the pages of files that became resident meanwhile (``RssFile`` and ``RssShmem``): the
  grading child is a fork, and a fork does not copy the page tables of mapped files, so every
  page of NumPy's or Python's code that a call runs is mapped again in the child, megabytes
  that say nothing of what the call allocated (and more of them when the machine has paged
  cold code out: a reference answer measured 4.1 MiB on a quiet machine and 5.8 MiB under
  load, 3.6 MiB of it code).  What is left is memory the call's own process allocated.
"""

from __future__ import annotations

import gc
import os
import sys
import tracemalloc
from types import FunctionType, ModuleType
from typing import Any

#: The grading kernel's malloc setting (``GLIBC_TUNABLES``, grading/sandbox.py): every allocation of 256 KiB or
#: more is mapped and unmapped on its own, so the resident memory follows what is alive (without it, freed memory
#: is reused unseen and the resident peak says little).  The second measure is taken only where it holds.
RESIDENT_TUNABLES = "glibc.malloc.mmap_threshold=262144"


def resident_measure_holds() -> bool:
    return RESIDENT_TUNABLES in os.environ.get("GLIBC_TUNABLES", "")

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
        self.trace_kept: bool | None = None
        self.resident_peak_bytes: int | None = None
        self.resident_kept_bytes: int | None = None
        self._saved: dict[str, Any] = {}
        self._sentinel: Any = None
        self._resident_before: int | None = None
        self._files_before: int | None = None

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
        self._sentinel = bytearray(64)  # traced from now on: its trace is lost if tracing stops or restarts
        self.before = _traced()[0]
        self._resident_before = _reset_resident_peak() if resident_measure_holds() else None
        self._files_before = _file_bytes()
        return self

    def __exit__(self, *exc: Any) -> None:
        resident_peak = status_bytes("VmHWM")
        files_after = _file_bytes()
        # pages of files mapped again during the call (see the module's docstring): resident at the end, so at
        # most that many of them were in the peak; what remains of the peak is memory the call allocated
        mapped_again = (max(files_after - self._files_before, 0)
                        if files_after is not None and self._files_before is not None else 0)
        if resident_peak is not None and self._resident_before is not None:
            self.resident_peak_bytes = max(resident_peak - self._resident_before - mapped_again, 0)
        self.trace_kept = _is_tracing() and tracemalloc.get_object_traceback(self._sentinel) is not None
        peak = max(self.banked, _traced()[1])
        self.peak_bytes = peak - self.before
        gc.collect()  # what the result keeps alive, not garbage that waits for the collector
        self.kept_bytes = _traced()[0] - self.before
        resident_after = status_bytes("VmRSS")
        if resident_after is not None and self._resident_before is not None:
            self.resident_kept_bytes = max(resident_after - self._resident_before - mapped_again, 0)
        for name, value in self._saved.items():
            setattr(tracemalloc, name, value)
        _stop()


def status_bytes(key: str) -> int | None:
    """A memory line of ``/proc/self/status`` (``VmRSS``, ``VmHWM``), in bytes; None where there is none."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(f"{key}:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _file_bytes() -> int | None:
    """The resident pages of mapped files and shared memory (``RssFile`` + ``RssShmem``), in bytes."""
    files, shared = status_bytes("RssFile"), status_bytes("RssShmem")
    return None if files is None else files + (shared or 0)


def _reset_resident_peak() -> int | None:
    """Reset the process's peak resident memory to what it holds now, and return that (None: not possible)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
            clear.write("5")
    except OSError:
        return None
    return status_bytes("VmRSS")


def _nothing(*args: Any, **kwargs: Any) -> None:
    """tracemalloc's start, stop and clear_traces while the grader measures."""
    return None


# --------------------------------------------------------------------------
# what the notebook made before a measured call: read-only during it
# --------------------------------------------------------------------------

#: Objects whose references are followed to the arrays they hold: of these modules' types (containers, cells,
#: generators, iterators, partial objects, caches) and the course's (``shared``), and the notebook's own classes,
#: functions and their instances.  Never a module, nor a class or function of a library (those hold only the
#: library's own).
_FOLLOWED_MODULES = frozenset({"builtins", "collections", "itertools", "functools", "types", "typing"})
FOLLOW_AT_MOST = 500_000  # objects that can hold others: a notebook's own data is far fewer
#: The modules graded code may reach besides the course's own (shared.allowlist.ALLOWED_MODULES, which the grading
#: kernel's tree does not hold; tests/test_measurement_guards.py keeps the two the same): their public containers
#: (``np.typecodes``, a dict of the course's) could hold an array that graded code put there by item assignment.
_REACHABLE_MODULES = ("numpy", "numpy.linalg", "numpy.random", "math", "functools", "itertools", "collections",
                      "collections.abc", "copy", "dataclasses", "fractions", "numbers", "typing")
OBJECT_ELEMENTS_AT_MOST = 100_000  # elements of an object array read
_ATOMIC = (int, float, complex, str, bytes, bool, type(None))  # hold no other object: never followed nor counted


class TooMuchToRead(RuntimeError):
    """The notebook holds more than the grader reads before a measured call: it cannot know what the call may
    write into, so the case is not measured (fail closed: anything left unread could hide an array)."""


def freeze_made_before(namespace: Any) -> int:
    """Make read-only every NumPy array reachable from ``namespace`` (the notebook's globals) or from the public
    containers of the modules graded code may reach, and every array such an array views; the bytes they own.

    Called in the grading child before each measured call (never in the notebook's own kernel), so that a call
    cannot work in memory made before it, which neither measure would count: a write into such an array raises
    ``ValueError: assignment destination is read-only``.  Reading it stays possible.  Raises TooMuchToRead past
    FOLLOW_AT_MOST objects or an object array of more than OBJECT_ELEMENTS_AT_MOST elements."""
    roots: list[Any] = []
    for name, module in list(sys.modules.items()):
        if isinstance(module, ModuleType) and (name in _REACHABLE_MODULES or name.startswith("shared.")):
            owners = [module] + [value for value in vars(module).values()  # and the course's classes
                                 if name.startswith("shared.") and isinstance(value, type) and value.__module__ == name]
            roots.extend(value for owner in owners for key, value in vars(owner).items()
                         if not key.startswith("_") and isinstance(value, (dict, list, set)))
    return _freeze_reachable([*roots, namespace], namespace)  # (the namespace last: read first)


def _freeze_reachable(roots: list[Any], namespace: Any) -> int:
    import numpy as np  # (here, not at the top: the sandbox's launcher imports this module, and must not import
    # NumPy, which a numpy.py beside the notebook would shadow in its folder)
    own = namespace.get("__name__", "__main__") if isinstance(namespace, dict) else "__main__"
    seen: set[int] = set()
    stack, frozen = list(roots), 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if len(seen) > FOLLOW_AT_MOST:
            raise TooMuchToRead(f"the grader reads what your notebook holds before a measured call (to make the "
                                f"arrays it made read-only), and it holds more than {FOLLOW_AT_MOST:,} objects: keep "
                                f"large collections out of the notebook's globals")
        if isinstance(obj, np.ndarray):
            frozen += _freeze(obj)
            if obj.dtype.hasobject:
                if obj.size > OBJECT_ELEMENTS_AT_MOST:
                    raise TooMuchToRead(f"an object array of more than {OBJECT_ELEMENTS_AT_MOST:,} elements is more "
                                        f"than the grader reads before a measured call")
                stack.extend(item for item in obj.reshape(-1).tolist() if not isinstance(item, _ATOMIC))
        elif _followed(obj, namespace, own):
            stack.extend(item for item in gc.get_referents(obj) if not isinstance(item, _ATOMIC))
    return frozen


def _followed(obj: Any, namespace: Any, own: str) -> bool:
    """Whether ``obj``'s references may lead to an array the notebook made (see :data:`_FOLLOWED_MODULES`):
    ``own`` is the notebook's module name (``__main__`` in a kernel), ``namespace`` its globals."""
    if isinstance(obj, ModuleType):
        return False
    if isinstance(obj, FunctionType):  # the notebook's own function (its defaults, closure), not a library's
        return obj.__globals__ is namespace
    if isinstance(obj, type):  # the notebook's own class (its attributes), not a library's
        return obj.__module__ == own and own != "builtins"
    module = getattr(type(obj), "__module__", "") or ""
    return module in _FOLLOWED_MODULES or module == own or module.startswith("shared.")


def _freeze(array: Any) -> int:
    """Make ``array`` (a NumPy array) and every array it views read-only; the bytes of those that own their memory."""
    import numpy as np
    frozen = 0
    while isinstance(array, np.ndarray):
        if array.flags.writeable:
            array.flags.writeable = False
            frozen += array.nbytes if array.flags.owndata else 0
        array = array.base
    return frozen
