"""The math of a feedback page, drawn where the page is made: TeX turned into MathML, no script.

A feedback page is one self-contained file: nbgrader hands a learner the ``.html`` alone, and
learners read it wherever they are, often offline.  nbgrader's template fetched MathJax from a
CDN, so without a network every formula stayed raw TeX; bundling MathJax instead would put two
megabytes of script in every page.  Here the page's math is converted once, in nbgrader's
process, into MathML, which browsers draw themselves (Chromium and Edge since 109, Firefox,
Safari).  Nothing in the page runs, which is stricter than MathJax's "Safe" extension: no
``\\href``, ``\\style``, ``\\class`` or ``\\unicode`` trick has anything to act on.

The converter (latex2mathml) copies some TeX into attributes (``\\href{javascript:…}``,
``\\style``) and leaves ``<`` and ``&`` of ``\\text{…}`` unescaped, so its tree is never
written out as it comes: every element is rebuilt from an allow-list of MathML tags and
attributes (values of plain words and numbers only), and every text is escaped.  An expression
it cannot translate fully (a command it does not know) is shown as its TeX source, as before.

A notebook cannot write MathML of its own into the page: ``SanitizeFeedback`` escapes every ``<``
of a markdown cell before it is rendered.  The same allow-list is what the page's check accepts
(``tools/instructor.py``); it is kept in ``grading/mathml.py``.

The formgrader's view of a submission is drawn with the same filter: there nbgrader's template loaded
MathJax from a CDN too, a script from outside in the instructor's logged-in JupyterLab.

Used by ``autograde/nbgrader_config.py``::

    c.HTMLExporter.filters = {"markdown2html": "grading.feedback_math.markdown2html"}
"""

from __future__ import annotations

import functools
import html
import re
from pathlib import Path
from xml.etree.ElementTree import Element

from latex2mathml.converter import convert_symbol, convert_to_element
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

from .mathml import MATHML_TAGS, mathml_attribute_allowed

# The template folder that replaces nbgrader's MathJax loader (feedback/ and formgrade/mathjax.html.j2).
TEMPLATES = Path(__file__).resolve().parent / "templates"

_CHARACTER_REFERENCE = re.compile(r"&#(x[0-9A-Fa-f]{1,6}|[0-9]{1,7});")
_COMMAND = re.compile(r"\\[A-Za-z]+")


class _Untranslated(Exception):
    """The converter left part of an expression untranslated (an element or a command it does not know)."""


def _character(match: re.Match) -> str:
    code = match.group(1)
    number = int(code[1:], 16) if code[0] == "x" else int(code)
    if number < 0x20 or 0xD800 <= number <= 0xDFFF or number > 0x10FFFF:
        return "\N{REPLACEMENT CHARACTER}"
    return chr(number)


def _symbol(match: re.Match) -> str:
    """A command the converter left as text (``\\lceil`` after ``\\big``), as its character."""
    code = convert_symbol(match.group(0))
    if code is None:
        raise _Untranslated(match.group(0))
    return chr(int(code, 16))


def _text(raw: str | None) -> str:
    """An element's text as escaped HTML: the converter's character references decoded, nothing else trusted."""
    if not raw:
        return ""
    text = _COMMAND.sub(_symbol, _CHARACTER_REFERENCE.sub(_character, raw))
    return html.escape(text, quote=False)


def _rebuilt(element: Element) -> str:
    """``element`` written out again through the allow-list (tags kept, attributes filtered, text escaped)."""
    tag = element.tag
    if tag not in MATHML_TAGS:
        raise _Untranslated(f"<{tag}>")
    attributes = "".join(f' {name}="{value}"' for name, value in element.attrib.items()
                         if mathml_attribute_allowed(tag, name, value))
    inner = _text(element.text) + "".join(_rebuilt(child) + _text(child.tail) for child in element)
    return f"<{tag}{attributes}>{inner}</{tag}>"


def tex_to_mathml(tex: str, *, display: bool) -> str | None:
    """MathML markup for the TeX expression ``tex`` (no delimiters), or None when it cannot be translated.

    ``display`` chooses a block (``$$…$$``, an environment) or an inline formula (``$…$``).
    """
    if not tex.strip():
        return None
    try:
        return _rebuilt(convert_to_element(tex, display="block" if display else "inline"))
    except Exception:  # noqa: BLE001  (_Untranslated, RecursionError, and latex2mathml's dozen kinds of TeX error)
        return None


class MathMLRenderer(IPythonRenderer):
    """nbconvert's markdown renderer, with math written as MathML instead of left for MathJax.

    The math reaches the renderer HTML-escaped (``grading.preprocessors.SanitizeFeedback`` escapes
    every ``<`` of a markdown cell before it is rendered), so it is unescaped back into TeX first;
    what is written out is escaped again.
    """

    def inline_math(self, body: str) -> str:
        return tex_to_mathml(html.unescape(body), display=False) or super().inline_math(body)

    def block_math(self, body: str) -> str:
        return tex_to_mathml(html.unescape(body), display=True) or super().block_math(body)

    def latex_environment(self, name: str, body: str) -> str:
        tex = html.unescape(f"\\begin{{{name}}}{body}\\end{{{name}}}")
        return tex_to_mathml(tex, display=True) or super().latex_environment(name, body)


@functools.lru_cache(maxsize=4096)  # most markdown of a page is the course's, the same for every student
def markdown2html(source: str) -> str:
    """A markdown cell as HTML, its math as MathML (the ``markdown2html`` filter of the feedback page)."""
    return MarkdownWithMath(renderer=MathMLRenderer(escape=False)).render(source)
