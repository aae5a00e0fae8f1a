"""What the parts' catalogues share: functions that make a lesson's mistakes, each told which one.

Many of a lesson's mistakes are one wrong function with a different twist (a wrong scale, a
missing ReLU, a step left out).  A part writes that function once and passes it the twist, the
mistake's short name, as a required argument: no value of it computes the right answer, and
:func:`check_mistake` refuses a twist that the function does not know, since there is no right
version to fall back on.
"""

from __future__ import annotations


def check_mistake(mistake, known):
    """Refuse a mistake that is not one of ``known``: there is no right version to fall back on."""
    if not (isinstance(mistake, str) and mistake in known):
        raise ValueError(f"unknown mistake {mistake!r}: one of {', '.join(known)}")
