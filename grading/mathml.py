"""The MathML a feedback page may hold: its tags, their attributes and the values those may take.

``grading/feedback_math.py`` writes a page's math through this allow-list, and the instructor's check of
every page (``tools/instructor.py: active_html``) accepts nothing else.  It is a module of its own, without
the converter, so that the instructor's commands need not import nbconvert (a quarter of a second each).
"""

from __future__ import annotations

import re

# MathML's presentation elements, and nothing that can hold HTML (annotation-xml) or a link.
MATHML_TAGS = frozenset({
    "math", "mrow", "mi", "mn", "mo", "ms", "mtext", "mspace", "mfrac", "msqrt", "mroot", "mstyle",
    "merror", "mpadded", "mphantom", "msub", "msup", "msubsup", "munder", "mover", "munderover",
    "mmultiscripts", "mprescripts", "none", "mtable", "mtr", "mtd", "menclose", "semantics", "annotation",
})
# Layout attributes only: no href, style, class, id, colour or namespace from a notebook's TeX.
MATHML_ATTRIBUTES = frozenset({
    "display", "displaystyle", "scriptlevel", "mathvariant", "stretchy", "fence", "separator", "symmetric",
    "largeop", "movablelimits", "accent", "accentunder", "form", "lspace", "rspace", "minsize", "maxsize",
    "width", "height", "depth", "voffset", "linethickness", "linebreak", "notation", "align", "frame",
    "framespacing", "columnalign", "rowalign", "columnspacing", "rowspacing", "columnlines", "rowlines",
    "columnspan", "rowspan", "equalrows", "equalcolumns",
})
# Words, numbers and lengths ("true", "0.167em", "left center", "-1"): no quote, colon, bracket or slash.
ATTRIBUTE_VALUE = re.compile(r"\A[A-Za-z0-9 .%+-]{0,64}\Z")


def mathml_attribute_allowed(tag: str, name: str, value: str) -> bool:
    """True when ``name="value"`` on the MathML element ``tag`` is one a feedback page may carry."""
    return tag in MATHML_TAGS and name in MATHML_ATTRIBUTES and bool(ATTRIBUTE_VALUE.match(value or ""))
