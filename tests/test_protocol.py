"""The names that cross the sandbox's wall are spelled once, in grading/protocol.py.

- No ``MCT_`` name is written out in ``grading/``, ``tools/`` or the course's nbgrader configuration
  but in the protocol: a string, a keyword argument or a name (docstrings and comments may name a
  variable, for the reader).
- ``shared/`` (the helper package the grading kernel imports) never imports from ``grading/``: its copies
  of the protocol's names are held equal to the protocol's here.
- The kernel's tree holds the protocol (the harness reads its names there).
- A verdict's reason is a :class:`grading.protocol.Reason`: one that is not cannot be made, where a reason
  is made or read it is spelled as a member, and every reason the judge (with its preprocessors) gives
  is one of them, each given on some path.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grading import protocol, rules, wire
from grading.judge import Verdict, drawn_cases, case_seed, judge_lesson, lesson_spec, reference_answer
from grading.protocol import Reason
from grading.spec import Case, Raises
from shared.lessons import lesson as find_lesson

ROOT = Path(__file__).resolve().parent.parent
#: Where the names must come from the protocol.
CHECKED = [*sorted((ROOT / "grading").rglob("*.py")), *sorted((ROOT / "tools").rglob("*.py")),
           ROOT / "autograde" / "nbgrader_config.py"]
PROTOCOL = ROOT / "grading" / "protocol.py"
ENV_NAMES = {name: value for name, value in vars(protocol).items() if name.endswith("_ENV")}


# --------------------------------------------------------------------------
# MCT_ names: spelled in the protocol only
# --------------------------------------------------------------------------

def _documentation(tree: ast.AST) -> set[int]:
    """The ids of the string constants that only document: docstrings and other bare string statements."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def spelled_names(source: str) -> list[tuple[int, str]]:
    """(line, text) of every place ``source`` spells an ``MCT_`` name in its code: a string (an f-string's
    text too), a keyword argument, a name or an attribute; not in a docstring or a comment."""
    tree = ast.parse(source)
    documentation = _documentation(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in documentation:
            text = node.value
        elif isinstance(node, ast.keyword):
            text = node.arg or ""
        elif isinstance(node, ast.Name):
            text = node.id
        elif isinstance(node, ast.Attribute):
            text = node.attr
        else:
            continue
        if protocol.ENV_PREFIX in text:
            found.append((getattr(node, "lineno", 0) or getattr(node.value, "lineno", 0), text))
    return sorted(found)


def test_the_check_finds_every_spelling_of_a_name_and_passes_its_documentation():
    source = '''"""MCT_SANDBOX=off: documented."""
import os
# MCT_RUN_SEED in a comment
env = dict(os.environ, MCT_COURSE_DIR="x")
a = os.environ.get("MCT_RUN_SEED")
b = f"set MCT_SANDBOX={a}"
c = os.environ.MCT_GRADING


def f():
    """Reads $MCT_CASES_FILE."""
    "a bare string: MCT_REVEAL_DIR"
    return {"MCT_KERNEL_TMP": 1}
'''
    assert [line for line, _ in spelled_names(source)] == [4, 5, 6, 7, 13]


@pytest.mark.parametrize("path", [p for p in CHECKED if p != PROTOCOL], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_mct_name_is_spelled_outside_the_protocol(path):
    found = spelled_names(path.read_text())
    assert not found, (f"{path.relative_to(ROOT)} spells {found}: use grading.protocol's name "
                       f"(one definition of each name that crosses the sandbox)")


def test_the_protocol_names_each_variable_once_with_the_prefix():
    assert ENV_NAMES and all(value.startswith(protocol.ENV_PREFIX) for value in ENV_NAMES.values())
    assert len(set(ENV_NAMES.values())) == len(ENV_NAMES)
    assert all(name == f"{value.removeprefix(protocol.ENV_PREFIX)}_ENV" for name, value in ENV_NAMES.items())


def test_every_variable_the_readme_names_is_the_protocols():
    named = set(re.findall(r"MCT_[A-Z_]*[A-Z]", (ROOT / "README.md").read_text()))
    assert named and named <= set(ENV_NAMES.values()), sorted(named - set(ENV_NAMES.values()))


def test_shared_keeps_copies_of_the_protocols_names_not_an_import_of_grading():
    """shared/ is what the grading kernel imports: it never imports from grading/, so shared.progress keeps
    its own copy of the names it reads, and they are the protocol's."""
    from shared import progress
    assert progress.GRADING_ENV == protocol.GRADING_ENV
    assert progress.PROGRESS_FILE_ENV == protocol.PROGRESS_FILE_ENV
    tree = ast.parse((ROOT / "shared" / "progress.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not any(name.split(".")[0] == "grading" for name in imported)
    found = spelled_names((ROOT / "shared" / "progress.py").read_text())
    assert sorted(text for _, text in found) == sorted([protocol.GRADING_ENV, protocol.PROGRESS_FILE_ENV])


def test_the_kernels_tree_holds_the_protocol_and_the_harness_reads_it_there(tmp_path):
    from grading import kernel_tree
    tree = kernel_tree.build("01_mlp_core", tmp_path / "tree")
    assert (tree / "grading" / "protocol.py").read_text() == PROTOCOL.read_text()
    run = subprocess.run([sys.executable, "-c", "import grading.harness as h, grading.protocol as p; "
                                                "print(h.__file__, p.ANSWERS_MIME, p.CASES_FILE_ENV)"],
                         cwd=tmp_path, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True)
    assert run.stdout.split() == [str(tree / "grading" / "harness.py"), protocol.ANSWERS_MIME,
                                  protocol.CASES_FILE_ENV], run.stderr[-2000:]


# --------------------------------------------------------------------------
# A verdict's reason
# --------------------------------------------------------------------------

def test_a_verdict_with_an_unknown_reason_cannot_be_made():
    with pytest.raises(ValueError, match="'values' is not a valid Reason"):
        Verdict("003", False, "wrong", "values")
    assert Verdict("003", False, "wrong").reason is Reason.GRADING
    assert Verdict("003", False, "wrong", "value").reason is Reason.VALUE  # a known reason's string is that reason


def test_a_reason_is_its_string_wherever_it_is_written():
    """Reports, messages and JSON show a reason as they did when it was a string."""
    for reason in Reason:
        assert reason == reason.value and str(reason) == reason.value and f"{reason}" == reason.value
        assert json.dumps(reason) == json.dumps(reason.value) and f"({reason!s})" == f"({reason.value})"
    assert Reason.NOT_STARTED == "not started" and Reason("no answers") is Reason.NO_ANSWERS


def _reason_code(tree: ast.AST) -> list[ast.FunctionDef]:
    """The functions that make or read a verdict's reason: they call Verdict, read ``.reason``, or are
    annotated to return a Reason."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        returns = ast.unparse(node.returns) if node.returns else ""
        uses = any((isinstance(inner, ast.Call) and ast.unparse(inner.func).split(".")[-1] == "Verdict")
                   or (isinstance(inner, ast.Attribute) and inner.attr == "reason")
                   for inner in ast.walk(node))
        if uses or "Reason" in returns:
            found.append(node)
    return found


@pytest.mark.parametrize("path", [p for p in CHECKED if p != PROTOCOL] + [ROOT / "tests" / "catalogue.py"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_where_a_reason_is_made_or_read_it_is_a_member_of_reason(path):
    tree = ast.parse(path.read_text())
    documentation = _documentation(tree)
    values = {reason.value for reason in Reason}
    spelled = [(function.name, node.lineno, node.value) for function in _reason_code(tree)
               for node in ast.walk(function)
               if isinstance(node, ast.Constant) and node.value in values and id(node) not in documentation]
    assert not spelled, f"{path.relative_to(ROOT)}: a reason spelled as a string {spelled}: use grading.protocol.Reason"


# Every reason the judge gives, each on a path of its own: judge_lesson on answers made here (as the harness
# sends them), the preprocessors' own verdicts, and the rules'.

def _cases(code: str) -> list[Case | Raises]:
    return drawn_cases(code, case_seed(0, code))


def _first(code: str, wanted) -> Case | Raises:
    return next(case for case in _cases(code) if wanted(case))


def _right(code: str, case: Case | Raises) -> dict:
    """The answer the reference gives to ``case``, as the harness would send it."""
    if isinstance(case, Raises):
        return {"kind": "raised", "error": case.error.__name__, "message": "", "traceback": ""}
    lesson, spec = find_lesson(code), lesson_spec(code)
    expected, sent = reference_answer(lesson, spec, case)
    answer = {"kind": "returned", "result": wire.to_plain(expected), "args_after": wire.to_plain(case.args),
              "aliases": [], "parts_shared": [], "workers_shared": [], "peak_bytes": 0, "kept_bytes": 0}
    return {**answer, **(sent or {})}


def _verdict(code: str, case: Case | Raises, **changed) -> Verdict:
    answer = {**_right(code, case), **changed}
    return judge_lesson(code, [case], {"lesson": code, "status": "answered", "answers": [answer]})


def _plus_one(case: Case) -> dict:
    return {name: value + 1 for name, value in case.args.items()}


def produced_reasons() -> dict[Reason, Verdict]:
    from grading.preprocessors.judgelessons import JudgeLessons, _apply_rules
    plain = _first("003", lambda case: isinstance(case, Case))
    refused = _first("011", lambda case: isinstance(case, Raises))
    on_cluster = _first("027", lambda case: isinstance(case, Case) and not case.own_cluster)
    measured = _first("017", lambda case: isinstance(case, Case) and case.measure)
    right = _verdict("003", plain)
    verdicts = [
        right,
        _verdict("003", plain, result=wire.to_plain(reference_answer(find_lesson("003"), lesson_spec("003"),
                                                                     plain)[0] + 1.0)),
        _verdict("003", plain, kind="unsendable", message="a Thing"),
        _verdict("011", refused, kind="returned"),
        _verdict("003", plain, kind="raised", error="ValueError", message="shapes do not match"),
        _verdict("003", plain, args_after=wire.to_plain(_plus_one(plain))),
        _verdict("003", plain, aliases=["the result shares memory with `x`"]),
        _verdict("017", measured, peak_bytes=2**40, kept_bytes=2**40),
        _verdict("027", on_cluster, traffic={"bytes_sent": [0], "messages_sent": [0], "rounds": 0}),
        judge_lesson("003", [plain], {"lesson": "003", "status": "answered", "answers": [
            {"kind": "raised", "error": "NotImplementedError", "message": "", "traceback": ""}]}),
        judge_lesson("003", [plain], {"lesson": "003", "status": "not_defined", "message": "not defined"}),
        judge_lesson("003", [plain], {"lesson": "003", "status": "timeout", "message": "too slow"}),
        judge_lesson("003", [plain], None),
        judge_lesson("003", [plain], {"lesson": "003", "status": "no_cases"}),
        JudgeLessons._judge("003", 5, "", {}, [(5, "003", "a second set")], {"003": [plain]}),
        _apply_rules(right, rules.check_notebook([{"cell_type": "code", "metadata": {},  # lesson 003's graded code
                                                   "source": "def linear_forward(x, W, b):\n    import os\n    return x\n"}],
                                                 "01_mlp_core")),
    ]
    produced: dict[Reason, Verdict] = {}
    for verdict in verdicts:
        assert type(verdict.reason) is Reason, verdict
        produced.setdefault(verdict.reason, verdict)
    return produced


def test_reason_covers_every_reason_the_judge_gives_and_each_is_given():
    produced = produced_reasons()
    assert set(produced) == set(Reason), sorted(set(Reason) - set(produced))
    assert produced[Reason.PASSED].passed and not any(v.passed for r, v in produced.items() if r != Reason.PASSED)
