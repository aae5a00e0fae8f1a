"""What the parts' catalogues share: functions that make a lesson's mistakes, each told which one.

Many of a lesson's mistakes are one wrong function with a different twist (a wrong scale, a
missing ReLU, a step left out).  A part writes that function once and passes it the twist, the
mistake's short name, as a required argument: no value of it computes the right answer, and
:func:`check_mistake` refuses a twist that the function does not know, since there is no right
version to fall back on.  Where the twist is the function's keyword-only argument ``mistake``,
:func:`twisted` makes the lesson's catalogue entries from a table of the twists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

from ..checking import Mistake


def check_mistake(mistake, known):
    """Refuse a mistake that is not one of ``known``: there is no right version to fall back on."""
    if not (isinstance(mistake, str) and mistake in known):
        raise ValueError(f"unknown mistake {mistake!r}: one of {', '.join(known)}")


def twisted(function: Callable[..., object], twists: Mapping[str, tuple[str, str]]) -> tuple[Mistake, ...]:
    """One :class:`~shared.checking.Mistake` per entry ``twist: (name, hint)`` of ``twists``, in its
    order: its ``compute`` takes the graded function's arguments and returns
    ``function(*args, mistake=twist)``."""
    return tuple(Mistake(name, hint, partial(function, mistake=twist)) for twist, (name, hint) in twists.items())
