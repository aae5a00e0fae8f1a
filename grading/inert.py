"""What of a learner's notebook an instructor's or a learner's page may show: one policy, written once.

Two pages show a submission: its feedback page (``grading.preprocessors.SanitizeFeedback``) and the
formgrader, which renders the autograded notebook inside the instructor's logged-in JupyterLab
(``grading.preprocessors.SanitizeSubmission`` makes that notebook inert before nbgrader writes it).
Both apply :func:`make_inert`, so nothing a notebook carries runs in either browser.

The policy is an allow-list, for every place where nbconvert writes a notebook's value into a page:

- **Markdown and raw cells** a learner wrote are shown as text: ``<`` is escaped (no raw HTML, no
  autolink), and so are ``](``, ``]:`` and ``://`` (no link or image target, however encoded, becomes a
  live URL) and ``javascript:``; attachments are dropped, and a raw cell loses the format that would
  make nbconvert paste it into the page verbatim.  The course's own text (a cell identical to one of the
  released notebook's) may be kept as it is: it is the course's, not the learner's.
- **Outputs** keep only :data:`SHOWN_MIME`: plain text, and PNG or JPEG images whose data is base64 and
  whose width and height are whole numbers (nbconvert writes them unquoted into the ``<img>`` tag).  No
  HTML, JavaScript, SVG, markdown, LaTeX or widget view reaches the page; an output left with nothing
  says so in plain text.
- **Names written into attributes** (a cell's tags become its ``class``, its id the element's ``id``) are
  plain words, or dropped.
- **The notebook's own metadata** keeps only :data:`NOTEBOOK_METADATA` (widget state, which would load a
  widget renderer into the page, is gone).
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from nbformat import NotebookNode

#: The outputs' forms a page may show (nbconvert renders each as escaped text or an <img> of base64 data).
SHOWN_MIME = ("text/plain", "image/png", "image/jpeg")
#: The notebook-level metadata kept (nbconvert reads the language from it; nothing of it is rendered).
NOTEBOOK_METADATA = ("kernelspec", "language_info", "nbgrader")
#: An output left with nothing it may show says so.
NOT_SHOWN = "[rich output not shown: only text and PNG or JPEG images are shown of a submission]"

PLAIN_WORD = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")
BASE64 = re.compile(r"\A[A-Za-z0-9+/=\s]*\Z")
RAW_FORMAT_KEYS = ("format", "raw_mimetype")


def inert_text(source: str) -> str:
    """A learner's markdown as text: raw HTML, links, images and bare URLs escaped (markdown's emphasis,
    headings, lists and math still read as such)."""
    text = source.replace("<", "&lt;").replace("](", "]&#40;").replace("]:", "]&#58;")
    text = text.replace("://", ":&#47;&#47;")  # a bare URL is not turned into a link either
    return re.sub(r"(?i)javascript:", "javascript&#58;", text)


def whole_number(value: Any) -> int | None:
    """A size as a whole number of pixels, or None (a string of digits counts; nothing else)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and re.fullmatch(r"\d{1,5}", value.strip()):
        value = int(value)
    return value if isinstance(value, int) and 0 < value < 100_000 else None


def image_sizes(metadata: Any) -> NotebookNode:
    """Of an output's metadata, only the width and height of its images, as whole numbers."""
    kept = NotebookNode()
    if not isinstance(metadata, dict):
        return kept
    for key, value in metadata.items():
        if key in ("width", "height"):
            size = whole_number(value)
            if size is not None:
                kept[key] = size
        elif key in SHOWN_MIME and key.startswith("image/") and isinstance(value, dict):
            sizes = {k: whole_number(value.get(k)) for k in ("width", "height")}
            sizes = {k: v for k, v in sizes.items() if v is not None}
            if sizes:
                kept[key] = NotebookNode(sizes)
    return kept


def _shown(mime: str, value: Any) -> bool:
    """Whether an output's ``mime`` form may be shown: text as text, images as base64 data only."""
    if mime == "text/plain":
        return isinstance(value, str)
    return mime in SHOWN_MIME and isinstance(value, str) and bool(BASE64.match(value))


def inert_output(output: NotebookNode) -> NotebookNode:
    """An output reduced to what a page may show (its plain text, its PNG or JPEG image, their sizes)."""
    data = output.get("data")
    if isinstance(data, dict):
        kept = NotebookNode({mime: value for mime, value in data.items() if _shown(mime, value)})
        output["data"] = kept or NotebookNode({"text/plain": NOT_SHOWN})
    if "metadata" in output or isinstance(data, dict):
        output["metadata"] = image_sizes(output.get("metadata"))
    return output


def plain_tags(tags: Any) -> list[str]:
    """A cell's tags (written into its class attribute): plain words only."""
    return [t for t in tags if isinstance(t, str) and PLAIN_WORD.match(t)] if isinstance(tags, list) else []


def _fresh_id(index: int, taken: set) -> str:
    """A plain cell id in place of a forged one (nbconvert writes the id into the cell's ``id`` attribute)."""
    name = f"cell-{index}"
    while name in taken:
        name += "-"
    taken.add(name)
    return name


def make_inert(nb: NotebookNode, course_text: Iterable[str] = ()) -> NotebookNode:
    """``nb`` with nothing left that could run in a page (in place; returned).

    ``course_text``: the sources of the course's own markdown cells; a markdown cell whose source is
    exactly one of them (and that carries no attachment) is the course's text and is kept as it is."""
    course = set(course_text)
    nb["metadata"] = NotebookNode({k: v for k, v in (nb.get("metadata") or {}).items() if k in NOTEBOOK_METADATA})
    ids = {cell.get("id") for cell in nb.cells}
    for index, cell in enumerate(nb.cells):
        metadata = cell.setdefault("metadata", NotebookNode())
        if "tags" in metadata:
            metadata["tags"] = plain_tags(metadata["tags"])
        if "id" in cell and not (isinstance(cell["id"], str) and PLAIN_WORD.match(cell["id"])):
            cell["id"] = _fresh_id(index, ids)
        if cell.cell_type in ("markdown", "raw"):
            course_own = cell.cell_type == "markdown" and cell.source in course and not cell.get("attachments")
            if not course_own:
                cell.source = inert_text(cell.source)
            cell.pop("attachments", None)
            for key in RAW_FORMAT_KEYS:
                metadata.pop(key, None)
        for output in cell.get("outputs", []):
            inert_output(output)
    return nb
