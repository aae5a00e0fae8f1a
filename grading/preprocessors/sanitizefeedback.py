"""``SanitizeFeedback``: nothing from a notebook runs in the browser of whoever opens its feedback page."""

from __future__ import annotations

import re
from typing import Any

from nbformat import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor


PLAIN_TAG = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")


def _whole_number(value: Any) -> int | None:
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
            size = _whole_number(value)
            if size is not None:
                kept[key] = size
        elif isinstance(key, str) and key.startswith("image/") and isinstance(value, dict):
            sizes = {k: _whole_number(value.get(k)) for k in ("width", "height")}
            sizes = {k: v for k, v in sizes.items() if v is not None}
            if sizes:
                kept[key] = NotebookNode(sizes)
    return kept


ACTIVE_MIME = ("text/html", "application/javascript", "image/svg+xml", "text/markdown", "text/latex")


class SanitizeFeedback(NbGraderPreprocessor):
    """Nothing from a notebook runs in the browser of whoever opens its feedback page.

    Raw HTML in markdown cells is shown as text (``<`` escaped), and so are links and images
    (``](``, ``]:`` and ``://`` escaped: a link target, however encoded, is never a live URL), and
    outputs keep only their plain-text and image forms (HTML, JavaScript, SVG and markdown
    outputs are dropped where a plain-text form exists, else replaced by a note).  No value
    from the notebook lands in an HTML attribute unchecked: an output's metadata keeps only an
    image's width and height, as whole numbers (nbconvert writes them unquoted), and a cell's
    tags (written into its class) only plain words.
    """

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]):
        for cell in nb.cells:
            tags = cell.get("metadata", {}).get("tags")
            if tags is not None:
                cell.metadata["tags"] = [t for t in tags if isinstance(t, str) and PLAIN_TAG.match(t)] \
                    if isinstance(tags, list) else []
            if cell.cell_type in ("markdown", "raw"):
                text = cell.source.replace("<", "&lt;").replace("](", "]&#40;").replace("]:", "]&#58;")
                text = text.replace("://", ":&#47;&#47;")  # a bare URL is not turned into a link either
                cell.source = re.sub(r"(?i)javascript:", "javascript&#58;", text)
                cell.pop("attachments", None)
            for output in cell.get("outputs", []):
                data = output.get("data")
                if not data:
                    continue
                for mime in [m for m in data if m in ACTIVE_MIME or "javascript" in m or "+json" in m]:
                    del data[mime]
                if not data:
                    data["text/plain"] = "[rich output not shown in feedback]"
                output["metadata"] = image_sizes(output.get("metadata"))
        return nb, resources
