"""Feedback pages draw their math as MathML made in the grader's process (grading/feedback_math.py).

Every formula of every learner notebook is translated (none left as raw TeX for a MathJax the
offline learner never loads), and TeX written to attack the page (links, styles, classes, markup
inside ``\\text``) comes out as plain math that the page's allow-list check accepts.
"""

from __future__ import annotations

import re
import sys
from html import unescape
from html.parser import HTMLParser

import nbformat
import pytest
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

from course import ROOT
from grading.feedback_math import markdown2html, tex_to_mathml
from grading.mathml import MATHML_TAGS
from grading.preprocessors import SanitizeFeedback

sys.path.insert(0, str(ROOT / "tools"))
import instructor  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


class _MathCounter(IPythonRenderer):
    """Counts the formulas nbconvert's markdown parser finds (what MathJax would have typeset)."""

    def __init__(self) -> None:
        super().__init__(escape=False)
        self.count = 0

    def inline_math(self, body: str) -> str:
        self.count += 1
        return ""

    block_math = inline_math

    def latex_environment(self, name: str, body: str) -> str:
        self.count += 1
        return ""


def _formulas(markdown: str) -> int:
    counter = _MathCounter()
    MarkdownWithMath(renderer=counter).render(markdown)
    return counter.count


def _elements(markup: str) -> list[tuple[str, dict]]:
    """Every start tag of ``markup`` with its attributes, as a browser's parser reads them."""
    found = []

    class Parser(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.append((tag, dict(attrs)))

    Parser().feed(markup)
    return found


def _page_text(fragment: str) -> str:
    return unescape(re.sub(r"<[^>]+>", "", fragment))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_formula_of_a_notebook_becomes_mathml(path):
    notebook = nbformat.read(path, as_version=4)
    SanitizeFeedback().preprocess(notebook, {})  # the feedback page renders the sanitised markdown
    expected = rendered = 0
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        page = markdown2html(cell.source)
        expected += _formulas(cell.source)
        rendered += page.count("<math")
        text = _page_text(re.sub(r"<math.*?</math>", "", page, flags=re.S))
        assert "$" not in text and not re.search(r"\\[A-Za-z]+", text), f"raw TeX left in:\n{cell.source}"
        assert instructor.active_html(f"<body>{page}</body>") == [], cell.source
    assert rendered == expected > 0


def test_a_formula_keeps_its_structure():
    fraction = tex_to_mathml(r"\frac{2(N-1)}{N}\,\Psi", display=False)
    assert fraction.startswith('<math display="inline">') and "<mfrac>" in fraction and "\u03a8" in fraction
    assert "<msubsup>" in tex_to_mathml(r"x_i^2", display=True)
    assert "\u2308" in tex_to_mathml(r"\big\lceil L/s \big\rceil", display=False)  # a symbol after \big
    assert 'display="block"' in tex_to_mathml(r"\begin{cases} a & x > 0 \\ b & \text{else} \end{cases}",
                                                display=True)


HOSTILE = [
    r"\href{javascript:alert(1)}{x}",
    r"\style{position:fixed;inset:0;background:red}{x}",
    r"\class{jp-Dialog}{x} + \color{red}{y}",
    r"\text{<img src=x onerror=alert(1)>} + \text{</math><script>alert(1)</script>}",
    r"\mathrm{<svg onload=alert(1)>} \unicode{x3C}",
    r"\text{&lt;b&gt; &#60;i&#62; &amp;}",
    r"\operatorname{x\"onmouseover=\"alert(1)}",
]


@pytest.mark.parametrize("tex", HOSTILE)
def test_tex_written_to_attack_the_page_comes_out_as_plain_math(tex):
    markup = tex_to_mathml(tex, display=True)
    assert markup is not None, tex
    elements = _elements(markup)
    assert {tag for tag, _ in elements} <= MATHML_TAGS, elements
    assert not {name for _, attributes in elements for name in attributes} & {"href", "style", "class", "id",
                                                                             "mathcolor", "onerror"}, elements
    assert instructor.active_html(f"<body><p>{markup}</p></body>") == [], markup


def test_a_formula_the_converter_cannot_translate_stays_as_its_tex():
    assert tex_to_mathml(r"\cssId{a}{x}", display=False) is None  # a command it does not know
    assert tex_to_mathml("x_{", display=False) is None  # malformed
    assert tex_to_mathml("{" * 5000 + "x" + "}" * 5000, display=False) is None  # nested past recursion
    page = markdown2html(r"Before $\cssId{a}{x}$ after.")
    assert "<math" not in page and r"$\cssId{a}{x}$" in _page_text(page)


def test_mathml_written_in_a_notebook_never_reaches_the_page_as_markup_and_the_check_refuses_it():
    forged = ('<math display="block" href="javascript:alert(1)"><mi style="position:fixed" class="x">a</mi>'
              '<annotation-xml encoding="text/html"><img src=x onerror=alert(1)></annotation-xml></math>')
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"A formula: {forged} and $x$.")])
    SanitizeFeedback().preprocess(notebook, {})
    page = markdown2html(notebook.cells[0].source)
    assert page.count("<math") == 1 and "<img" not in page and "<annotation-xml" not in page  # only $x$
    assert instructor.active_html(f"<body>{page}</body>") == []
    found = instructor.active_html(f"<body>{forged}</body>")
    assert any("href" in f for f in found) and any("style" in f for f in found) \
        and any("annotation-xml" in f for f in found), found


# --------------------------------------------------------------------------
# The page's exporter (grading/feedback_page.py): the template's page, alt text added as nbconvert would
# --------------------------------------------------------------------------

def test_every_image_without_alt_text_gets_nbconvert_s_default_and_no_other_changes():
    from grading.feedback_page import MISSING_ALT, with_alt_text
    page = ('<p>x</p><img src="data:image/png;base64,QUxUPQ==">'  # no alt
            '<IMG src="a" alt="a plot">'  # has one
            '<img title="alt=not an attribute" src=\'b\'>'  # "alt=" only inside a value
            '<img alt src="c">')  # an empty alt is an alt
    assert with_alt_text(page) == (f'<p>x</p><img alt="{MISSING_ALT}" src="data:image/png;base64,QUxUPQ==">'
                                   '<IMG src="a" alt="a plot">'
                                   f'<img alt="{MISSING_ALT}" title="alt=not an attribute" src=\'b\'>'
                                   '<img alt src="c">')
    assert with_alt_text("<p>no image</p>") == "<p>no image</p>"


def test_the_page_is_what_nbconvert_s_html_exporter_writes(tmp_path):
    """The same document as nbconvert's HTMLExporter (which re-reads its page with BeautifulSoup) writes, with
    the classic template that nbgrader's feedback template extends."""
    from bs4 import BeautifulSoup
    from nbconvert.exporters import HTMLExporter
    from grading.feedback_page import FeedbackExporter
    notebook = nbformat.read(ROOT / "solutions" / "01_mlp_core.ipynb", as_version=4)
    notebook.cells[-1].outputs = [nbformat.v4.new_output(
        "display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"})]
    from traitlets.config import Config
    config = Config()  # nbgrader's feedback template is built on the classic one, which has no JupyterLab cells
    config.HTMLExporter.template_name = "classic"
    config.HTMLExporter.filters = {"markdown2html": "grading.feedback_math.markdown2html"}
    ours, _ = FeedbackExporter(config=config).from_notebook_node(notebook)
    theirs, _ = HTMLExporter(config=config).from_notebook_node(notebook)
    assert str(BeautifulSoup(ours, features="html.parser")) == theirs
    assert ours.count("<img") == 1 and "No description has been provided" in ours
