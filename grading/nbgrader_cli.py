"""``nbgrader`` as the course's tools start it: the same program, without loading rfc3987_syntax.

nbgrader reads notebooks with nbformat, and nbformat imports jsonschema.  When the package
rfc3987_syntax is installed (Jupyter's own packages require it), jsonschema imports it to
check strings of the "iri" format, and that import compiles some forty Earley grammars:
three to four seconds of CPU in every nbgrader process before it does anything
(python-jsonschema/jsonschema#1428).  No schema that nbgrader or nbformat reads uses the
"iri" format (nbformat checks no string format at all), so the grading processes start
nbgrader without it.  A course graded in one go starts dozens of them.

    python -m grading.nbgrader_cli autograde 01_mlp_core    # does what `nbgrader autograde 01_mlp_core` does

The venv's own ``nbgrader`` command is left as it is.
"""

from __future__ import annotations

import sys


def command(*args: str) -> list[str]:
    """The argv that runs ``nbgrader *args`` this way, with this process's Python."""
    return [sys.executable, "-m", "grading.nbgrader_cli", *args]


def main() -> int:
    # With None in sys.modules, `import rfc3987_syntax` raises ImportError, and jsonschema,
    # which imports it inside `with suppress(ImportError)`, goes on without the "iri" check.
    sys.modules.setdefault("rfc3987_syntax", None)
    from nbgrader.apps.nbgraderapp import main as nbgrader_main
    nbgrader_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
