"""The exporter of a feedback page: nbconvert's HTML exporter without its second pass over the page.

nbconvert's ``HTMLExporter`` renders the page with its template and then reads the whole page
again with BeautifulSoup, to give every ``<img>`` without ``alt`` a default text and to make the
cells of a JupyterLab page focusable (``.jp-Notebook div.jp-Cell-inputWrapper``).  For a feedback
page that second pass is most of the work: a graded notebook's page is about half a megabyte of
highlighted code (some 50,000 tags), and parsing and writing it out again took longer than
rendering it.  nbgrader's feedback template is the classic one, which has no ``jp-`` cells, so of
that pass only the ``alt`` text does anything; here it is added by a pattern that reads each
``<img>`` tag's attributes, and the page is otherwise the template's own output.

The course's template (``grading/templates/feedback/course.html.j2``) names test cells by their lessons and
writes scores as numbers are written: its filters ``lesson_label`` and ``points`` come from here
(:mod:`grading.feedback_text`).

One nbgrader process writes the pages of many students, and most of a page's code is the
course's own (set-up, tests, demonstrations), the same for every student: the highlighted HTML
of a cell is kept for the next page with the same source, language and cell metadata.

Used by ``autograde/nbgrader_config.py``::

    c.GenerateFeedback.exporter_class = "grading.feedback_page.FeedbackExporter"
"""

from __future__ import annotations

import json
import re
from typing import Any

from jinja2.bccache import Bucket, BytecodeCache
from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
from nbformat import NotebookNode

from .feedback_text import lesson_label, points

MISSING_ALT = "No description has been provided for this image"  # nbconvert's own default text
# One <img ...> tag: quoted attribute values may hold ">" or "alt=" without ending the tag or counting.
_IMG_TAG = re.compile(r"""<img\b((?:[^>"']|"[^"]*"|'[^']*')*)>""", re.IGNORECASE)
_QUOTED = re.compile(r""""[^"]*"|'[^']*'""")
_ALT = re.compile(r"(?:^|\s)alt\s*(?:=|\s|/|$)", re.IGNORECASE)
HIGHLIGHTED_CELLS_KEPT = 4096  # cells whose highlighted HTML one process keeps (a part has about 60)
_HIGHLIGHTED: dict[tuple[str, ...], str] = {}  # (lexer, language, cell magic, options, source) -> its HTML


def with_alt_text(page: str) -> str:
    """``page`` with ``alt="…"`` (nbconvert's default text) added to every ``<img>`` tag that has none."""
    def fill(tag: re.Match) -> str:
        attributes = tag.group(1)
        if _ALT.search(_QUOTED.sub('""', attributes)):
            return tag.group(0)
        return f'<img alt="{MISSING_ALT}"{attributes}>'
    return _IMG_TAG.sub(fill, page)


class TemplatesCompiledOnce(BytecodeCache):
    """Jinja's compiled templates, kept in this process's memory: nbgrader makes an exporter (and with it a
    Jinja environment that compiles the page's ten templates) for each command, and one process runs a
    command per part. Jinja checks each kept template against its source's checksum before using it."""

    def __init__(self) -> None:
        self._compiled: dict[str, bytes] = {}

    def load_bytecode(self, bucket: Bucket) -> None:
        compiled = self._compiled.get(bucket.key)
        if compiled is not None:
            bucket.bytecode_from_string(compiled)

    def dump_bytecode(self, bucket: Bucket) -> None:
        self._compiled[bucket.key] = bucket.bytecode_to_string()


_COMPILED_TEMPLATES = TemplatesCompiledOnce()


class FeedbackExporter(HTMLExporter):
    """``HTMLExporter`` whose page is the template's output, with alt text for images (see above)."""

    def _create_environment(self):
        environment = super()._create_environment()
        environment.bytecode_cache = _COMPILED_TEMPLATES
        return environment

    def default_filters(self):
        """nbconvert's filters, and the course template's: a lesson's name from a grade id, a score as a number."""
        yield from super().default_filters()
        yield ("lesson_label", lesson_label)
        yield ("points", points)

    @staticmethod
    def highlight_once(highlight: Highlight2HTML, lexer: str | None):
        """``highlight`` (the ``highlight_code`` filter), remembering what it returned for this process.

        Most cells of a part are the same in every student's notebook (the lessons' given code and
        tests), so each is highlighted once per process. Of a cell's metadata only the language of a
        cell magic changes its highlighting (nbconvert reads ``magics_language`` and nothing else):
        the rest, such as the times each cell ran, differs from student to student and is no part of
        the key."""
        options = json.dumps(highlight.extra_formatter_options, sort_keys=True, default=str)

        def highlight_code(source: str, language: str | None = None, metadata: Any = None) -> str:
            magics = metadata.get("magics_language") if isinstance(metadata, dict) else None
            key = (str(lexer), str(language), str(magics), options, source)
            if key not in _HIGHLIGHTED:
                if len(_HIGHLIGHTED) >= HIGHLIGHTED_CELLS_KEPT:
                    _HIGHLIGHTED.clear()
                _HIGHLIGHTED[key] = highlight(source, language=language, metadata=metadata)
            return _HIGHLIGHTED[key]
        return highlight_code

    def from_notebook_node(self, nb: NotebookNode, resources: dict[str, Any] | None = None,
                           **kw: Any) -> tuple[str, dict[str, Any]]:
        # What HTMLExporter.from_notebook_node does before its BeautifulSoup pass (nbconvert 7).
        langinfo = nb.metadata.get("language_info", {})
        lexer = langinfo.get("pygments_lexer", langinfo.get("name", None))
        highlight_code = self.filters.get("highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self))
        resources = self._init_resources(resources)
        filter_data_type = WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata, parent=self,
                                                 resources=resources)
        if isinstance(highlight_code, Highlight2HTML):  # nbconvert's own (not one set in the configuration)
            highlight_code = self.highlight_once(highlight_code, lexer)
        self.register_filter("highlight_code", highlight_code)
        self.register_filter("filter_data_type", filter_data_type)
        page, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        return with_alt_text(page), resources
