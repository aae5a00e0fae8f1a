"""What the course's preprocessors share: the part a notebook belongs to."""

from __future__ import annotations

from typing import Any


def part_slug(resources: dict[str, Any]) -> str:
    """The slug of the part being graded (nbgrader's assignment name, the same as the part's)."""
    return str(resources.get("nbgrader", {}).get("assignment", ""))
