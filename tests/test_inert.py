"""A hostile submission is inert in the formgrader and in its feedback page (grading/inert.py).

The autograded notebook is what nbgrader's formgrader renders, as live HTML, inside the instructor's
logged-in JupyterLab.  Here a released notebook gets every kind of hostile content a learner can put in
a notebook file (markdown HTML and script in the forms the sanitizers' own test suites use, event
attributes on images, HTML/JS/SVG outputs, widget views and widget state, forged tags and ids), goes
through ``SanitizeSubmission`` and is rendered by the formgrader's own exporter and template, as the course
configures them (tests/course.py's ``formgrader_page``); the page
must carry no tag or attribute that the same page of the untouched release does not carry (the
allow-list check of the feedback pages, tools/instructor.py's ``active_html``).  The course's own
markdown (lesson text with math) is kept as it is.  And the page check itself reads a page as a browser does:
on random pages, whatever Chromium finds that would run, the check reports.  A few seconds, no kernel.
"""

from __future__ import annotations

import copy
import html
import random
import re
from html.parser import HTMLParser

import nbformat
import pytest
from nbformat import NotebookNode

from course import ROOT, formgrader_page, read, tool
from hostile import LEARNER_MATH, MARK, PNG, hostile
from grading import inert
from grading.course import landed_parts
from grading.preprocessors import SanitizeFeedback, SanitizeSubmission
from grading.protocol import COURSE_DIR_ENV

instructor = tool("instructor")
SLUG = landed_parts()[0]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A course folder holding the released notebook (what SanitizeSubmission compares markdown with)."""
    folder = tmp_path_factory.mktemp("course")
    (folder / "release" / SLUG).mkdir(parents=True)
    nbformat.write(read(ROOT / "notebooks" / f"{SLUG}.ipynb"), folder / "release" / SLUG / f"{SLUG}.ipynb")
    return folder


def sanitized(nb: NotebookNode, course, monkeypatch) -> NotebookNode:
    monkeypatch.setenv(COURSE_DIR_ENV, str(course))
    resources = {"nbgrader": {"assignment": SLUG, "notebook": SLUG}}
    return SanitizeSubmission().preprocess(copy.deepcopy(nb), resources)[0]


def test_a_hostile_submission_is_inert_in_the_formgrader(course, monkeypatch):
    release = read(ROOT / "notebooks" / f"{SLUG}.ipynb")
    baseline_page = formgrader_page(sanitized(release, course, monkeypatch))
    baseline = set(instructor.active_html(baseline_page))
    unsanitized = hostile(release)
    unsanitized.cells[-1]["id"] = "plain"  # (nbconvert refuses to render a forged id at all)
    raw = formgrader_page(unsanitized, course=False)  # (the course's markdown filter refuses it outright)
    assert set(instructor.active_html(raw)) - baseline, "the check sees the hostile forms when nothing is done"
    assert live_marks(raw), "and so does the mark's"
    page = formgrader_page(sanitized(hostile(release), course, monkeypatch))
    assert sorted(set(instructor.active_html(page)) - baseline) == []
    assert live_marks(page) == [], "a script of the notebook's is live in the page"
    assert page.count("<script") == baseline_page.count("<script")


class _Live(HTMLParser):
    """Where the mark is live in a page: in a tag's name or attribute, or in a script or style element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found, self.inside = [], []

    def handle_starttag(self, tag, attrs):
        self.inside.append(tag)
        self.found += [f"<{tag} {name}={value!r}>" for name, value in attrs if MARK.lower() in f"{name}{value}".lower()]

    def handle_endtag(self, tag):
        if tag in self.inside:
            del self.inside[self.inside.index(tag):]

    def handle_data(self, data):
        if MARK in data and self.inside and self.inside[-1] in ("script", "style", "svg", "math", "iframe"):
            self.found.append(f"<{self.inside[-1]}>{data[:60]}")


def live_marks(page: str) -> list[str]:
    parser = _Live()
    parser.feed(page)
    return parser.found


def test_the_student_s_id_and_names_are_text_in_the_formgrader(course, monkeypatch):
    """nbgrader's formgrade template writes the student's id (a folder's name under submitted/), the gradebook's
    names and the notebook's path raw, and the formgrader's page runs inline scripts: a red team opened a
    terminal in the instructor's session with a last name. The course escapes them first (EscapePeople);
    nbgrader's own exporter, without it, writes the script as it came."""
    notebook = sanitized(read(ROOT / "notebooks" / f"{SLUG}.ipynb"), course, monkeypatch)
    script = "<script>document.title='PWNED'</script>"
    frame = "<iframe srcdoc=\"<script>parent.document.title='PWNED'</script>\">"
    people = {"student": f"s1{frame}", "first_name": script, "last_name": f'"><img src=x onerror=alert(1)>{frame}',
              "notebook_path": f"/autograded/s1{script}/01_mlp_core.ipynb"}
    page = formgrader_page(notebook, people=people)
    assert "PWNED" in page and "<script>document.title" not in page and "<iframe" not in page.lower()
    assert "onerror=alert" not in page.replace("onerror=alert(1)&gt;", ""), "an attribute left live"
    assert "&lt;script&gt;document.title=" in page  # shown, as text
    only_id = formgrader_page(notebook, people={**people, "first_name": "", "last_name": ""})
    assert "s1&lt;iframe srcdoc=" in only_id and "<iframe" not in only_id.lower()  # the id, where no names are
    raw = formgrader_page(notebook, people=people, course=False)
    assert "<script>document.title='PWNED'</script>" in raw  # what the escaping stands between


def test_the_course_text_is_kept_and_the_learner_s_is_shown_as_text(course, monkeypatch):
    release = read(ROOT / "notebooks" / f"{SLUG}.ipynb")
    nb = sanitized(hostile(release), course, monkeypatch)
    course_text = [c.source for c in release.cells if c.cell_type == "markdown"]
    kept = [c.source for c in nb.cells if c.cell_type == "markdown" and c.source in course_text]
    assert len(kept) == len(course_text) - 1  # all but the one the learner edited, math and all
    assert any("$$" in text for text in kept)
    edited = next(c for c in nb.cells if c.cell_type == "markdown")
    assert edited.source.endswith(f"&lt;img src=x onerror={MARK}()>")
    page = html.unescape(formgrader_page(nb))
    assert f"<img src=x onerror={MARK}()>" in page  # shown, as text, for the instructor to read


#: A value that names something off the server: an address with a host (``https://…``, ``//…``), in an attribute
#: or a style; in a script, one in quotes or with its scheme (``//`` alone starts a comment there).  The page's own
#: addresses are paths on the server: ``/formgrader/static/…``.
_OFF_THE_SERVER = re.compile(r"""(?i)(?:^|['"(\s=])\s*(?:[a-z][a-z0-9+.-]*:)?//""")
_OFF_THE_SERVER_IN_A_SCRIPT = re.compile(r"""(?i)['"`]\s*(?:[a-z][a-z0-9+.-]*:)?//|\b[a-z][a-z0-9+.-]*://""")


class _Addresses(HTMLParser):
    """Where a page names anything off the server (every attribute, and the text of its scripts and styles; the
    page's text is only read), and the sources of its scripts."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.outside, self.scripts, self.inside = [], [], None

    def handle_starttag(self, tag, attrs):
        self.inside = tag if tag in ("script", "style") else None
        self.scripts += [value for name, value in attrs if tag == "script" and name == "src"]
        self.outside += [f"<{tag} {name}={value!r}>" for name, value in attrs if _OFF_THE_SERVER.search(value or "")]

    def handle_endtag(self, tag):
        self.inside = None

    def handle_data(self, data):
        found = {"script": _OFF_THE_SERVER_IN_A_SCRIPT, "style": _OFF_THE_SERVER}.get(self.inside)
        if found and found.search(data):
            self.outside.append(f"<{self.inside}>{data[found.search(data).start():][:80]}")


def addresses(page: str) -> _Addresses:
    parser = _Addresses()
    parser.feed(page)
    return parser


def test_the_formgrader_draws_the_math_as_mathml_and_loads_nothing_from_outside(course, monkeypatch):
    """nbgrader's formgrade template loads MathJax 2.7.7 from cdnjs: a script from outside in the instructor's
    logged-in session, and no math drawn without a network.  The course's page has every formula, the course's and
    a learner's (inline, display, an environment), as MathML written when the page is made (the markdown2html
    filter; grading/templates/formgrade/mathjax.html.j2 takes MathJax's place), and names nothing off the server:
    its scripts are nbgrader's own files.  The learner's text around their math stays text."""
    from test_feedback_math import _formulas

    release = read(ROOT / "notebooks" / f"{SLUG}.ipynb")
    baseline = set(instructor.active_html(formgrader_page(sanitized(release, course, monkeypatch))))
    learner = copy.deepcopy(release)
    learner.cells.append(nbformat.v4.new_markdown_cell(LEARNER_MATH))
    nb = sanitized(learner, course, monkeypatch)
    page = formgrader_page(nb)
    formulas = [_formulas(c.source) for c in nb.cells if c.cell_type == "markdown"]
    assert formulas[-1] == 5 and page.count("<math") == sum(formulas) > 20 + 5, "a formula is not MathML"
    assert '<math display="block"><mrow><mtable' in page and "<mo>&lt;</mo>" in page  # the align, and $\delta < 0$
    found = addresses(page)
    assert found.outside == [], "the page names something off the server"
    assert found.scripts and all(src.startswith("/formgrader/static/") for src in found.scripts), found.scripts
    assert "cdnjs" not in page and "text/x-mathjax-config" not in page
    assert sorted(set(instructor.active_html(page)) - baseline) == [] and live_marks(page) == []
    text = html.unescape(page)
    assert f"<img src=x onerror={MARK}()>" in text and f"https://evil.example/{MARK}.png" in text  # shown, as text
    assert f"\\href{{javascript:{MARK}()}}" in text  # (the TeX link is text, its formula MathML)
    raw = formgrader_page(release, course=False)  # nbgrader's own template: what the course's stands between
    assert [src for src in addresses(raw).scripts if "cdnjs.cloudflare.com" in src] and "<math" not in raw


def test_outputs_keep_only_text_and_images_with_whole_number_sizes(course, monkeypatch):
    nb = sanitized(hostile(read(ROOT / "notebooks" / f"{SLUG}.ipynb")), course, monkeypatch)
    outputs = nb.cells[-1].outputs
    assert {mime for output in outputs for mime in output.data} <= set(inert.SHOWN_MIME)
    assert [dict(o.metadata) for o in outputs if "image/png" in o.data][-3:] == [{}, {}, {}]
    assert outputs[0].data == {"text/plain": "html"}
    assert outputs[1].data == {"text/plain": inert.NOT_SHOWN}
    assert outputs[6].data == {"text/plain": inert.NOT_SHOWN}  # image data that is not base64
    assert outputs[7].data == {"image/jpeg": PNG}
    assert nb.cells[-1].metadata.tags == ["plain"]
    assert set(nb.metadata) <= set(inert.NOTEBOOK_METADATA)


def test_the_feedback_page_and_the_formgrader_share_one_policy(course, monkeypatch):
    """Feedback applies the same definition (every markdown cell escaped there: its math is the course's MathML)."""
    nb = hostile(read(ROOT / "notebooks" / f"{SLUG}.ipynb"))
    feedback = SanitizeFeedback().preprocess(copy.deepcopy(nb), {})[0]
    assert feedback == inert.make_inert(copy.deepcopy(nb))
    submission = sanitized(nb, course, monkeypatch)
    assert [c.get("outputs") for c in feedback.cells] == [c.get("outputs") for c in submission.cells]


# ------------------------------------------------------------------------ the page check reads as a browser reads

#: Pieces of pages: where HTML parsers part ways (comments and their broken ends, CDATA, declarations, raw-text,
#: template and foreign elements, NUL and other controls, stray quotes, slashes and brackets), forms the page
#: check admits (a link within the page, an embedded image, a colour), and what runs or changes a page.
PIECES = ["<!--", "-->", "--!>", "<!-->", "<!--->", "<!", "<![CDATA[", "]]>", "<![", "<!doctype x>", "<?", "?>", ">",
          "<", "</", "</p/>", "<math>", "</math>", "<mtext>", "<mi>", '<annotation-xml encoding="text/html">', "<svg>",
          "</svg>", "<foreignObject>", "<textarea>", "</textarea>", "<title>", "</title>", "<noscript>", "</noscript>",
          "<xmp>", "</xmp>", "<style>", "</style>", "<script>", "</script>", "<template>", "</template>", "<table>",
          "<td>", "<select>", "<option>", "<iframe>", "</iframe>", "<noembed>", "<noframes>", "<plaintext>",
          '<p title="', '">', "'", '"', "=", " ", "/", "\n", "\r", "\t", "\x0c", "\x0b", "\x00", "\xa0", "&lt;",
          "&#60;", "&", "<div", "</div>", "<a", "<b>", "</b>", "<p>", "</p>", "-", "--", "[", "]]", "x",
          "<a href=#x>", '<img src="data:image/png;base64,AAAA">', '<span style="color: rgb(1, 2, 3)">', "<div tabindex=0>",
          f"<img src=x onerror={MARK}()>", "<img", " src=x", f" onerror={MARK}()", f"onerror={MARK}()", f"<a/onclick={MARK}()>",
          f' href="javascript:{MARK}()"', ' style="position:fixed"', "<base href=//e>", "<form action=//e>",
          " formaction=//e", f"<body onload={MARK}()>", "<object data=//e>", "<link rel=x href=//e>", "<frameset>"]

#: For each page, whether a browser finds in its body something that runs or changes the page: an event handler,
#: a script, frame, form, style, link, base or meta element (HTML's own, or anything of SVG), a source, an action,
#: a link out of the page, or a style other than the colour above.
RUNS_IN_A_BROWSER = """pages => {
  const HTML = 'http://www.w3.org/1999/xhtml', SVG = 'http://www.w3.org/2000/svg';
  const ELEMENTS = ['script', 'iframe', 'frame', 'frameset', 'object', 'embed', 'form', 'style', 'link', 'meta', 'base'];
  const ATTRIBUTES = ['srcdoc', 'action', 'formaction', 'xlink:href', 'data', 'srcset', 'background'];
  const runs = (element, attribute) => attribute.name.startsWith('on') || ATTRIBUTES.includes(attribute.name)
    || (attribute.name === 'href' && !attribute.value.startsWith('#'))
    || (attribute.name === 'src' && !(element.localName === 'img' && attribute.value.startsWith('data:image/png;')))
    || (attribute.name === 'style' && attribute.value !== 'color: rgb(1, 2, 3)');
  return pages.map(text => {
    const body = new DOMParser().parseFromString(text, 'text/html').body;
    return [...body.querySelectorAll('*')].some(element =>
      element.namespaceURI === SVG || (element.namespaceURI === HTML && ELEMENTS.includes(element.localName))
      || [...element.attributes].some(attribute => runs(element, attribute)));
  });
}"""


def test_the_page_check_reports_whatever_a_browser_would_run(page):
    """The page check (tools/instructor.py's ``active_html``) reads a page with Python's HTMLParser; the instructor's
    browser reads it with its own parser.  Here Chromium parses 30,000 pages made of random runs of PIECES, and on
    every page whose body it finds something in that runs or changes the page, the check reports something.
    (It found 59 such pages in 20,000 when the check read comments, CDATA and NUL as HTMLParser does: a browser
    ends ``<!-->`` at its first ``>``, where HTMLParser reads on to a later ``-->``, hiding the tag between.)"""
    rng = random.Random(20261205)
    fragments = ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 8))) for _ in range(30_000)]
    documents = [f"<!DOCTYPE html>\n<html><head><title>t</title></head><body><p>{text}</p></body></html>\n"
                 for text in fragments]
    runs = page.evaluate(RUNS_IN_A_BROWSER, documents)
    assert sum(runs) > 5_000, "the search reaches what runs in a browser"
    missed = [text for text, document, found in zip(fragments, documents, runs)
              if found and not instructor.active_html(document)]
    assert missed == [], f"{len(missed)} pages run something in a browser that the page check passes: {missed[:5]}"


def test_the_page_check_admits_only_the_elements_the_course_s_pages_are_made_of():
    """An allow-list (tools/instructor.py's ``_BODY_ELEMENTS``): any element outside it is reported, whatever it is
    (raw text, a template, a form control, one no browser knows), with no attribute at all; the elements of a
    page's text, code and formulas are not."""
    for tag in ("script", "style", "textarea", "xmp", "noscript", "template", "select", "button", "marquee", "svg",
                "x-widget", "dialog"):
        assert instructor.active_html(f"<body><p><{tag}>x</{tag}></p></body>") == [f"<{tag}>"], tag
    text = ("<body><main><div class='cell'><h2 id='a'>A</h2><p><em>b</em> <strong>c</strong> <code>d</code></p>"
            "<ul><li>e</li></ul><pre><span style='color: rgb(1, 2, 3)'>f</span></pre><table><tr><td>g</td></tr>"
            "</table><math><mrow><mi>x</mi><mo>=</mo><mn>1</mn></mrow></math></div></main></body>")
    assert instructor.active_html(text) == []
