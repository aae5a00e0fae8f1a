"""Which helper functions answer which lesson, and the lock that applies while it is graded.

The helper package holds the MLP (and, later, the cluster and the optimizer)
that every part builds on, so some of its functions compute a lesson's answer:
``shared.mlp.forward`` is lesson 005's ``mlp_forward`` in all but name.  Each
such function is marked ``@answers("005")``.  While lesson 005 is graded the
grading kernel calls :func:`lock` with ``"005"``, and a marked function then
refuses to run, so a learner's ``mlp_forward`` that only delegates to the
helper earns nothing.  The lesson's own work is the point; the helper is there
for the lessons that come after it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_locked: set[str] = set()


class HelperNotAllowed(RuntimeError):
    """A helper function was called while the lesson it answers was being graded."""


def lock(*codes: str) -> None:
    """From now on (in this process), helpers that answer lessons ``codes`` refuse to run."""
    _locked.update(codes)


def unlock() -> None:
    _locked.clear()


def answers(*codes: str) -> Callable[[F], F]:
    """Mark a helper function as computing the answer of lessons ``codes`` (e.g. ``"005"``)."""
    def mark(function: F) -> F:
        @functools.wraps(function)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            hit = _locked.intersection(codes)
            if hit:
                code = min(hit)
                raise HelperNotAllowed(
                    f"shared.{function.__module__.rsplit('.', 1)[-1]}.{function.__name__} computes the answer "
                    f"of lesson {code}, so it cannot be used while lesson {code} is graded: "
                    f"write the lesson's function yourself")
            return function(*args, **kwargs)
        del guarded.__wrapped__  # no shortcut around the lock
        # ... but help() and the notebook's tooltip show the real arguments, not (*args, **kwargs)
        guarded.__signature__ = inspect.signature(function)  # type: ignore[attr-defined]
        guarded.answers_lessons = codes  # type: ignore[attr-defined]
        return guarded  # type: ignore[return-value]
    return mark
