"""Hostile forms a learner can put in a notebook file, for the tests that show a submission to someone.

tests/test_inert.py renders them with the formgrader's own template (after grading/inert.py's policy);
tests/test_instructor.py opens them in the formgrader in Chromium.  Every script here calls ``MCTXSS()``
(a function the browser tests define, to count what ran) or names the mark, so that a page where any of
them is live can be found.
"""

from __future__ import annotations

import copy

import nbformat
from nbformat import NotebookNode

MARK = "MCTXSS"  # every script below calls or names this; none may survive as live HTML

# Markdown a learner may write: the forms of the HTML sanitizers' own test suites (bleach, html5lib, DOMPurify)
# and markdown's own ways to make a link or an image.
HOSTILE_MARKDOWN = [
    f"<script>{MARK}()</script>",
    f"<img src=x onerror={MARK}()>",
    f'<img src="x" onerror="{MARK}()" width="1 onload={MARK}()">',
    f"<svg onload={MARK}()><circle r=1 /></svg>",
    f"<svg><script>{MARK}()</script></svg>",
    f'<a href="javascript:{MARK}()">click</a>',
    f'<a href="&#106;avascript:{MARK}()">entity-encoded scheme</a>',
    f'<a href="jav&#x09;ascript:{MARK}()">tab in the scheme</a>',
    f"<iframe srcdoc='<script>{MARK}()</script>'></iframe>",
    f'<iframe src="data:text/html,<script>{MARK}()</script>"></iframe>',
    f'<object data="javascript:{MARK}()"></object><embed src="javascript:{MARK}()">',
    f"<details open ontoggle={MARK}()>x</details>",
    f"<math><mtext><table><mglyph><style><img src=x onerror={MARK}()>",
    f"<form action=javascript:{MARK}()><button>go</button></form>",
    f"<style>@import 'http://evil.example/{MARK}.css';</style>",
    f'<div style="background:url(javascript:{MARK}())">styled</div>',
    f"<base href='http://evil.example/{MARK}/'>",
    f'<meta http-equiv="refresh" content="0;url=javascript:{MARK}()">',
    f"<!--<img src=x onerror={MARK}()>-->",
    # comments that a browser ends at their first ">" and Python's HTMLParser (3.11) does not, so the image
    # after them is live in a browser and unseen by a check that reads the page with HTMLParser
    f"<!--> <img src=x onerror={MARK}()> -->",
    f"<!---> <img src=x onerror={MARK}()> -->",
    f"<!-- x --!> <img src=x onerror={MARK}()> -->",
    f"<![CDATA[ > <img src=x onerror={MARK}()> ]]>",
    f"<scr<script>ipt>{MARK}()</script>",
    f"[link](javascript:{MARK}())",
    f"[link](  JaVaScRiPt:{MARK}() )",
    f"![image](x\" onerror=\"{MARK}())",
    f"![image](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9J{MARK}')",
    f"[ref]\n\n[ref]: javascript:{MARK}()",
    f"<javascript:{MARK}()>",
    f"<http://evil.example/{MARK}>",
    f"$\\href{{javascript:{MARK}()}}{{x}}$",
    f"```html\n<script>{MARK}()</script>\n```\n</pre><script>{MARK}()</script>",
    # what the formgrader hole did: a terminal opened through Jupyter's API, as the logged-in instructor
    f"<img src=x onerror=\"{MARK}();fetch('/api/terminals?_xsrf='+document.cookie.split('_xsrf=')[1],"
    f"{{method:'POST'}})\">",
]
# A learner's answer in their own words with math written as the lessons write it (inline, display, an environment),
# and beside it what must stay text: markup, a TeX link around a formula, an address.  The math is drawn as MathML
# (grading/feedback_math.py), the rest is shown as it was typed.
LEARNER_MATH = ("So $\\delta < 0$ where $z \\le 0$, and $$\\frac{\\partial L}{\\partial W} = \\delta\\, x^\\top$$\n\n"
                "\\begin{align}\ny &= W x + b \\\\\nz &= \\max(0, y)\n\\end{align}\n\n"
                f"\\href{{javascript:{MARK}()}}{{$x$}} <img src=x onerror={MARK}()> https://evil.example/{MARK}.png")
# Outputs a notebook file may carry (a kernel's, or written by hand).
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
HOSTILE_OUTPUTS = [
    {"text/html": f"<img src=x onerror={MARK}()>", "text/plain": "html"},
    {"application/javascript": f"{MARK}()"},
    {"image/svg+xml": f"<svg onload={MARK}()></svg>"},
    {"text/markdown": f"<img src=x onerror={MARK}()>"},
    {"text/latex": f"$\\href{{javascript:{MARK}()}}{{x}}$"},
    {"application/vnd.jupyter.widget-view+json": {"model_id": MARK, "version_major": 2, "version_minor": 0}},
    {"image/png": f'x" onerror="{MARK}()'},
    {"image/jpeg": PNG, "text/html": f"<script>{MARK}()</script>"},
]
IMAGE_SIZES = [{"width": f"1 onerror={MARK}()"}, {"image/png": {"height": f'2" onload="{MARK}()'}}, {"width": 3.5}]


def hostile(notebook: NotebookNode) -> NotebookNode:
    """``notebook`` with every hostile form added, and one course cell edited to carry a script."""
    nb = copy.deepcopy(notebook)
    course_cell = next(c for c in nb.cells if c.cell_type == "markdown")
    course_cell.source += f"\n\n<img src=x onerror={MARK}()>"
    cells = [nbformat.v4.new_markdown_cell(text) for text in HOSTILE_MARKDOWN]
    attached = nbformat.v4.new_markdown_cell(f"![x](attachment:{MARK}.svg)")
    attached["attachments"] = {f"{MARK}.svg": {"image/svg+xml": f"<svg onload={MARK}()></svg>"}}
    raw = nbformat.v4.new_raw_cell(f"<script>{MARK}()</script>", metadata={"format": "text/html",
                                                                          "raw_mimetype": "text/html"})
    code = nbformat.v4.new_code_cell("print(1)", metadata={"tags": [f'x" onclick="{MARK}()', "plain"]})
    code["id"] = f'x" onfocus="{MARK}()'
    code.outputs = [nbformat.v4.new_output("display_data", data=data) for data in HOSTILE_OUTPUTS]
    code.outputs += [nbformat.v4.new_output("display_data", data={"image/png": PNG}, metadata=sizes)
                     for sizes in IMAGE_SIZES]
    nb.cells += [*cells, attached, raw, code]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {MARK: {}}}}
    nb.metadata["title"] = f"</title><script>{MARK}()</script>"
    return nb
