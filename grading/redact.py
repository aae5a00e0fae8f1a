"""What the grading kernel may not see of the helper package while a part is graded.

The helper package holds functions that compute some lessons' answers (each
marked ``@answers("005")``, see :mod:`shared.answers`).  While a part is graded,
the sandbox shows the kernel a copy of each such module in which the functions
that answer one of the part's lessons are *redacted*: same name, signature and
docstring, but the body only raises :class:`shared.answers.HelperNotAllowed`.
The real code is not in the sandbox at all (``shared/__pycache__`` is hidden
too), so no trick inside the kernel can bring it back.

Composite lessons need some of those functions (``mlp_backward`` is graded with
the helper's ``linear_backward``): :func:`revealed_blocks` gives their source,
which the grader shows the kernel only while that lesson's test cell runs, when
the lessons they answer have already been graded.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from shared.lessons import lessons_of

SHARED = Path(__file__).resolve().parent.parent / "shared"


def _answered_codes(node: ast.FunctionDef) -> set[str]:
    codes: set[str] = set()
    for decorator in node.decorator_list:
        if isinstance(decorator, ast.Call) and getattr(decorator.func, "id", "") == "answers":
            codes |= {arg.value for arg in decorator.args if isinstance(arg, ast.Constant)}
    return codes


def redact_module(source: str, codes: set[str], slug: str) -> str | None:
    """``source`` with the bodies of the functions answering ``codes`` replaced (None: nothing to do)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    cuts = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and _answered_codes(node) & codes:
            body = node.body
            has_doc = isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant)
            keep_until = body[0].end_lineno if has_doc and len(body) > 1 else body[0].lineno - 1
            indent = " " * body[0].col_offset
            code = sorted(_answered_codes(node) & codes)[0]
            stub = (f"{indent}raise HelperNotAllowed(\"shared.{{}}.{node.name} computes the answer of lesson {code}; "
                    f"it is not available while {slug} is graded\".format(__name__.rsplit('.', 1)[-1]))\n")
            cuts.append((keep_until, node.end_lineno, stub))
    if not cuts:
        return None
    for start, end, stub in sorted(cuts, reverse=True):
        lines[start:end] = [stub]
    text = "".join(lines)
    return text + "\n\nfrom shared.answers import HelperNotAllowed  # noqa: E402  (for the redacted functions)\n"


def redacted_sources(slug: str) -> dict[str, str]:
    """{module file name: redacted source} of every helper module that answers a lesson of ``slug``."""
    codes = {lesson.code for lesson in lessons_of(slug)}
    found = {}
    for path in sorted(SHARED.glob("*.py")):
        text = redact_module(path.read_text(), codes, slug)
        if text is not None:
            found[path.name] = text
    return found


@functools.lru_cache(maxsize=None)
def revealed_blocks(names: tuple[str, ...]) -> str:
    """The source of ``shared.lesson_blocks``'s functions ``names``, with the module's imports.

    Kept per grading process: every notebook of a part reveals the same blocks, and parsing the
    module again for each was a few hundredths of a second per notebook."""
    source = (SHARED / "lesson_blocks.py").read_text()
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    parts = ["".join(lines[node.lineno - 1:node.end_lineno]) for node in tree.body
             if isinstance(node, (ast.Import, ast.ImportFrom))]
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            parts.append("\n\n" + "".join(lines[start - 1:node.end_lineno]))
    text = "".join(parts)  # the module's relative imports, made absolute: the blocks run outside the package
    return re.sub(r"^from \.(\w+) import", r"from shared.\1 import",
                  text.replace("from . import", "from shared import"), flags=re.MULTILINE)
