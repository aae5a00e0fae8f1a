"""A submitted notebook too large or nested too deeply is refused before it is read.

nbgrader reads each submission whole into Python objects (a 64 MiB markdown cell once took the grader to
770 MiB, and its feedback page 32 s to write).  ``BoundedNotebookExporter``, nbgrader's reader for
``autograde`` (``c.Autograde.exporter_class``), first checks the file from the disk, without decoding it:
its size against MAX_NOTEBOOK_BYTES, and how deeply its JSON nests against MAX_NOTEBOOK_DEPTH (a scan of
its brackets, a block at a time).  A notebook past either is not graded; the error names the limit, and
``make autograde`` lists the notebook with it.
"""

from __future__ import annotations

import os
import re

from nbconvert.exporters import NotebookExporter

from .protocol import MAX_NOTEBOOK_BYTES_ENV

MAX_NOTEBOOK_BYTES = int(os.environ.get(MAX_NOTEBOOK_BYTES_ENV, 16 * 2**20))  # the course's are ~0.1 MB
MAX_NOTEBOOK_DEPTH = 64  # a notebook's JSON nests about 6 deep (an output's data a little deeper)
BLOCK = 2**20
_SIGNIFICANT = re.compile(rb'[\[\]{}"\\]')


class NotebookRefusedError(ValueError):
    """A submission refused unread (too large, or nested too deeply)."""


def depth_of(path: str, limit: int = MAX_NOTEBOOK_DEPTH) -> int:
    """How deeply the JSON in ``path`` nests (its brackets outside strings), read a block at a time; the scan
    stops as soon as it passes ``limit`` (and returns that depth).  Only brackets, quotes and backslashes are
    looked at (a regular expression finds them), so text is passed over quickly."""
    depth = deepest = 0
    in_string = False
    escaped_at = -1  # the offset of the character a backslash escapes
    offset = 0
    with open(path, "rb") as handle:
        while block := handle.read(BLOCK):
            for found in _SIGNIFICANT.finditer(block):
                at, byte = offset + found.start(), found.group()
                if in_string:
                    if at == escaped_at:
                        continue
                    if byte == b"\\":
                        escaped_at = at + 1
                    elif byte == b'"':
                        in_string = False
                elif byte == b'"':
                    in_string = True
                elif byte in b"[{":
                    depth += 1
                    deepest = max(deepest, depth)
                    if deepest > limit:
                        return deepest
                elif byte in b"]}":
                    depth -= 1
            offset += len(block)
    return deepest


def check_submission(path: str) -> None:
    """Raise NotebookRefusedError if the notebook at ``path`` is past a limit (it is not decoded)."""
    size = os.stat(path).st_size
    if size > MAX_NOTEBOOK_BYTES:
        raise NotebookRefusedError(f"the notebook is {size:,} bytes, more than the {MAX_NOTEBOOK_BYTES:,} a "
                                   f"submission may have: refused unread (this notebook needs a human look)")
    if depth_of(path) > MAX_NOTEBOOK_DEPTH:
        raise NotebookRefusedError(f"the notebook's JSON is nested more than {MAX_NOTEBOOK_DEPTH} levels deep: "
                                   f"refused unread (this notebook needs a human look)")


class BoundedNotebookExporter(NotebookExporter):
    """nbgrader's notebook reader and writer for autograde, which first refuses a submission past a limit."""

    def from_filename(self, filename, resources=None, **kw):
        check_submission(str(filename))
        return super().from_filename(filename, resources=resources, **kw)
