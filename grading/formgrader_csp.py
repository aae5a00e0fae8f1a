"""The formgrader's Content-Security-Policy: the second wall around a submission shown to the instructor.

The first wall is :mod:`grading.inert` (the autograded notebook the formgrader renders holds nothing
that runs).  This one is the browser's: ``make formgrader``'s JupyterLab sends, on every page, a policy
under which no event-handler attribute runs (``onerror=``, ``onload=``, ``onclick=``: the way HTML
pasted into a page most often runs script) except the three nbgrader's own templates carry, each
allowed by the hash of its exact text (``'unsafe-hashes'``, CSP level 3); no plugin (``object-src``),
and no ``<base>`` that would send the page's relative links elsewhere.

nbgrader's pages need inline ``<script>`` elements (they hold each page's ids and addresses) and
JupyterLab writes its own, so ``<script>`` elements are not restricted here: that is the first wall's
work, and tests/test_inert.py proves it for the formgrader's own template.  The course's view of a
submission adds one, the fixed stand-in for MathJax that nbgrader's formgrade.js calls
(grading/templates/formgrade/mathjax.html.j2); its math is MathML and needs no script, and the page
loads nothing from outside the server.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

_HANDLER = re.compile(r'\son[a-z]+="([^"]*)"')


def nbgrader_handlers() -> list[str]:
    """The event-handler attributes' texts that nbgrader's formgrader templates carry (its own)."""
    import nbgrader
    templates = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"
    found = set()
    for path in sorted(templates.rglob("*")):
        if path.is_file() and path.suffix in (".tpl", ".j2", ".html"):
            found.update(_HANDLER.findall(path.read_text(errors="replace")))
    return sorted(found)


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def policy(report_uri: str = "/api/security/csp-report") -> str:
    """The header's value (jupyter_server's own ``frame-ancestors`` and report address kept)."""
    allowed = " ".join(_hash(text) for text in nbgrader_handlers())
    return "; ".join([
        "frame-ancestors 'self'",
        f"script-src-attr 'unsafe-hashes' {allowed}" if allowed else "script-src-attr 'none'",
        "object-src 'none'",
        "base-uri 'self'",
        f"report-uri {report_uri}",
    ])


def server_config() -> dict:
    """jupyter_server's configuration that sends the policy on every page (API handlers add theirs to it)."""
    return {"ServerApp": {"tornado_settings": {"headers": {"Content-Security-Policy": policy()}}}}
