"""``nbgrader`` as the course's tools start it: without loading rfc3987_syntax, and several parts in one process.

nbgrader reads notebooks with nbformat, and nbformat imports jsonschema.  When the package
rfc3987_syntax is installed (Jupyter's own packages require it), jsonschema imports it to
check strings of the "iri" format, and that import compiles some forty Earley grammars:
three to four seconds of CPU in every nbgrader process before it does anything
(python-jsonschema/jsonschema#1428).  No schema that nbgrader or nbformat reads uses the
"iri" format (nbformat checks no string format at all), so the grading processes start
nbgrader without it.  (pyproject.toml also keeps jsonschema below 4.24, the first release that
imports it, so that no other process of the course pays for it either: the Jupyter servers,
nbconvert, pytest's workers.  This stays for an environment that installs a newer jsonschema.)

nbgrader grades one assignment per command, and each command is a new process: a second to
import nbgrader and half a second to shut it down, more than a solved notebook of a small part
takes to grade.  Here one process can run several commands, one after the other, separated by
``--then``: each runs as its own nbgrader command would (a fresh application, the configuration
read again); one that fails does not stop the next, and the exit status is the worst of them.

    python -m grading.nbgrader_cli autograde 01_mlp_core    # does what `nbgrader autograde 01_mlp_core` does
    python -m grading.nbgrader_cli autograde 01_mlp_core --student s1 --then autograde 02_gradient_accumulation --student s1

The venv's own ``nbgrader`` command is left as it is.
"""

from __future__ import annotations

import sys


def skip_iri_grammars() -> None:
    """Let jsonschema (which nbformat imports) go on without rfc3987_syntax, as nbgrader does here (see above).

    Called by the course's tools before they import nbformat themselves: it saves them the same seconds."""
    # With None in sys.modules, `import rfc3987_syntax` raises ImportError, and jsonschema,
    # which imports it inside `with suppress(ImportError)`, goes on without the "iri" check.
    sys.modules.setdefault("rfc3987_syntax", None)


class SchemaCheckedOnce:
    """``jsonschema`` as nbgrader's check of a cell's metadata calls it, checking each schema once.

    nbgrader validates every cell's ``nbgrader`` metadata with ``jsonschema.validate(metadata, schema)``,
    which first checks the *schema itself* against jsonschema's meta-schema: for the same schema, on every
    cell of every notebook (65 ms a notebook, a few per cent of its grading). This does what
    ``jsonschema.validate`` does, with the validator of each schema made (and its schema checked) once;
    a cell's metadata is checked as before and raises the same error."""

    def __init__(self) -> None:
        self._validators: dict[int, tuple[dict, object]] = {}  # id(schema) -> (the schema, kept alive; its validator)

    def validate(self, instance, schema) -> None:
        import jsonschema
        held = self._validators.get(id(schema))
        if held is None or held[0] is not schema:
            kind = jsonschema.validators.validator_for(schema)
            kind.check_schema(schema)
            held = self._validators[id(schema)] = (schema, kind(schema))
        error = jsonschema.exceptions.best_match(held[1].iter_errors(instance))
        if error is not None:
            raise error


def check_nbgrader_schema_once() -> None:
    """nbgrader's cell-metadata check, with its schema checked once per process (SchemaCheckedOnce)."""
    from nbgrader.nbgraderformat import common
    common.jsonschema = SchemaCheckedOnce()


THEN = "--then"  # between two commands run by one process (no nbgrader option is called that)


def command(*args: str) -> list[str]:
    """The argv that runs ``nbgrader *args`` this way, with this process's Python."""
    return [sys.executable, "-m", "grading.nbgrader_cli", *args]


def commands(*each: list[str]) -> list[str]:
    """The argv that runs every nbgrader command of ``each`` (an argv each), one after the other, in one process."""
    args: list[str] = []
    for argv in each:
        args += ([THEN] if args else []) + list(argv)
    return command(*args)


def split_commands(argv: list[str]) -> list[list[str]]:
    """The nbgrader commands of ``argv`` (separated by ``--then``)."""
    each: list[list[str]] = [[]]
    for arg in argv:
        if arg == THEN:
            each.append([])
        else:
            each[-1].append(arg)
    return [argv for argv in each if argv]


def run_nbgrader(argv: list[str]) -> int:
    """One nbgrader command in this process, as ``nbgrader *argv`` would run it; its exit status.

    Afterwards nbgrader's own ``reset`` forgets the application and its subcommand's (traitlets keeps
    each as a singleton: the next command would get the last one back, with its options)."""
    from nbgrader.apps.nbgraderapp import NbGraderApp
    app = NbGraderApp.instance()  # the one launch_instance starts
    try:
        NbGraderApp.launch_instance(argv)
        status = 0
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        app.reset()
    return status


# The errors that say most about why nbgrader could not grade a submission, the most telling first.
TELLING_ERRORS = ("NotJSONError", "CellTimeoutError", "DeadKernelError", "Kernel died", "timed out",
                  "UnresponsiveKernelError", "ValidationError", "RuntimeError", "Error")


def failure_reason(log: str, student: str | None = None, slug: str | None = None) -> str:
    """The most telling line of a failed nbgrader run's ``log``: why it could not grade a submission.

    With ``student`` and ``slug`` (a run that graded several submissions), only the traceback nbgrader
    printed for that student's submission of ``slug`` is read."""
    lines = log.splitlines()
    if student is not None:
        marker = "There was an error processing assignment: "
        starts = [i for i, line in enumerate(lines)
                  if marker in line and line.rstrip().endswith(f"/submitted/{student}/{slug}")]
        if starts:
            section = []
            for line in lines[starts[0] + 1:]:
                if line.startswith("[AutogradeApp |") and section:
                    break
                section.append(line)
            lines = section or lines
    for needle in TELLING_ERRORS:
        for line in reversed(lines):
            if needle in line and "Traceback" not in line and "There was an error" not in line:
                return line.strip()[:200]
    return (log.strip().splitlines() or ["unknown error"])[-1][:200]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    skip_iri_grammars()
    check_nbgrader_schema_once()
    return max((run_nbgrader(each) for each in split_commands(argv)), default=0)


if __name__ == "__main__":
    sys.exit(main())
