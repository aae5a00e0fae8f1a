"""What grading spends on each notebook, cut without changing a verdict (issue 44).

Each cut is held here by what it changes, not by a time (times are the benchmark's:
``make bench-grading``):

- the kernel's harness sends a case's inputs back only when the call changed them (they were most
  of the bytes a notebook sent the judge), and a changed input still reaches the judge whole;
- the harness reads the part's cases once per kernel, and again when the file changes;
- the kernel's tree is byte-compiled where it is built, and a kernel imports it without compiling;
- building a tree does not import matplotlib (it cost every nbgrader process a second);
- nbgrader's check of each cell's metadata checks its schema once, and rejects what it rejected;
- a feedback page's code cell the same in every notebook is highlighted once per process (the times a
  cell ran, in its metadata, are no part of the key; a cell magic's language is), and a process
  compiles the page's templates once, not once per nbgrader command.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from grading import harness, kernel_tree, wire
from grading.nbgrader_cli import SchemaCheckedOnce
from grading.protocol import CASES_FILE_ENV

ROOT = Path(__file__).resolve().parent.parent


def cases_file(folder: Path, *inputs: np.ndarray) -> Path:
    """A cases file of one lesson, "x", whose function ``f`` is called once on each input."""
    path = folder / "cases.json"
    cases = [{"args": wire.to_plain({"a": array})} for array in inputs]
    path.write_text(json.dumps({"lessons": {"x": {"function": "f", "cases": cases, "time_limit": 20}}}))
    return path


def answers(monkeypatch, path: Path, function) -> list[dict]:
    monkeypatch.setenv(CASES_FILE_ENV, str(path))
    payload = harness.collect_answers("x", {"f": function})
    assert payload["status"] == "answered", payload
    return payload["answers"]


def test_inputs_go_back_to_the_judge_only_when_the_call_changed_them(tmp_path, monkeypatch):
    path = cases_file(tmp_path, np.arange(4.0), np.ones((2, 3), dtype=np.float32))
    kept, = {json.dumps(sorted(a)) for a in answers(monkeypatch, path, lambda a: a.sum())}
    assert "args_unchanged" in kept and "args_after" not in kept

    def doubles_in_place(a):
        a *= 2
        return a.sum()

    changed = answers(monkeypatch, path, doubles_in_place)
    assert [a.get("args_unchanged") for a in changed] == [None, None]
    after = wire.from_plain(changed[0]["args_after"])
    np.testing.assert_array_equal(after["a"], np.arange(4.0) * 2)


def test_a_learner_who_changes_an_input_is_still_told_so_by_the_judge():
    from grading.judge import grade_in_process, reference_function
    from grading.protocol import Reason
    from shared.lessons import lesson as find_lesson

    reference = reference_function(find_lesson("004"))
    namespace = dict(reference.__globals__)

    def relu_forward(z):  # right values, but the input is overwritten
        np.maximum(z, 0, out=z)
        return z.copy()

    assert reference.__name__ == "relu_forward"
    namespace["relu_forward"] = relu_forward
    verdict = grade_in_process("004", namespace)
    assert verdict.reason == Reason.MUTATION, verdict


def test_the_cases_are_read_once_per_kernel_and_again_when_the_file_changes(tmp_path, monkeypatch):
    path = cases_file(tmp_path, np.arange(3.0))
    monkeypatch.setenv(CASES_FILE_ENV, str(path))
    first = harness._load_lessons()
    assert harness._load_lessons() is first
    cases_file(tmp_path, np.arange(5.0), np.arange(2.0))
    again = harness._load_lessons()
    assert len(again["x"]["cases"]) == 2


def test_a_kernel_imports_its_tree_compiled_and_compiles_nothing(tmp_path):
    tree = kernel_tree.build("01_mlp_core", tmp_path / "tree")
    assert sorted(p.stem for p in (tree / "shared" / "__pycache__").iterdir()) == sorted(
        f"{p.stem}.{sys.implementation.cache_tag}" for p in (tree / "shared").glob("*.py"))
    probe = (
        "import sys, importlib._bootstrap_external as b\n"
        "def refuse(*args, **kwargs): raise SystemExit('compiled from source: ' + str(args[1]))\n"
        "b.SourceLoader.source_to_code = refuse\n"
        "import shared.mlp, shared.cluster, shared.memory, shared.notebook, grading.harness, matplotlib.pyplot\n"
        "print(shared.mlp.__file__)\n")
    run = subprocess.run([sys.executable, "-S", "-B", "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": f"{tree}:{':'.join(p for p in sys.path if 'site-packages' in p)}",
                              "PYTHONDONTWRITEBYTECODE": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == str(tree / "shared" / "mlp.py")


def test_building_a_tree_does_not_import_matplotlib(tmp_path):
    probe = ("import sys; from pathlib import Path; from grading import kernel_tree\n"
             f"kernel_tree.build('03_activation_checkpointing', Path({str(tmp_path / 'tree')!r}))\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]"


SCHEMA = {"type": "object", "properties": {"grade": {"type": "boolean"}, "points": {"type": "number"}},
          "required": ["grade"]}


@pytest.mark.parametrize("metadata", [{"grade": True, "points": 5}, {"grade": "yes"}, {"points": 5},
                                      {"grade": False, "points": "five"}])
def test_nbgrader_s_cell_check_says_what_jsonschema_says(metadata):
    try:
        jsonschema.validate(metadata, SCHEMA)
        expected = None
    except jsonschema.ValidationError as error:
        expected = error.message
    try:
        SchemaCheckedOnce().validate(metadata, SCHEMA)
        found = None
    except jsonschema.ValidationError as error:
        found = error.message
    assert found == expected


def test_nbgrader_s_cell_check_checks_its_schema_once(monkeypatch):
    checked = []
    kind = jsonschema.validators.validator_for(SCHEMA)
    monkeypatch.setattr(kind, "check_schema", classmethod(lambda cls, schema: checked.append(schema)))
    once = SchemaCheckedOnce()
    for _ in range(5):
        once.validate({"grade": True}, SCHEMA)
    assert checked == [SCHEMA]
    with pytest.raises(jsonschema.ValidationError):
        once.validate({"grade": 1}, SCHEMA)


def test_the_course_s_nbgrader_uses_the_check(monkeypatch):
    from nbformat.v4 import new_code_cell
    from nbgrader.nbgraderformat import MetadataValidator, common

    from grading import nbgrader_cli
    monkeypatch.setattr(common, "jsonschema", common.jsonschema)  # put back after the test
    nbgrader_cli.check_nbgrader_schema_once()
    assert isinstance(common.jsonschema, SchemaCheckedOnce)
    validator = MetadataValidator()
    good = {"schema_version": validator.schema_version, "grade": True, "grade_id": "a", "points": 5,
            "solution": False, "locked": True}
    validator.validate_cell(new_code_cell(metadata={"nbgrader": good}))
    with pytest.raises(jsonschema.ValidationError):
        validator.validate_cell(new_code_cell(metadata={"nbgrader": {**good, "points": "five"}}))


def test_a_cell_the_same_in_every_notebook_is_highlighted_once_whatever_its_metadata(monkeypatch):
    from nbconvert.filters.highlight import Highlight2HTML

    from grading import feedback_page
    monkeypatch.setattr(feedback_page, "_HIGHLIGHTED", {})
    calls = []

    class Counted(Highlight2HTML):
        def __call__(self, source, language=None, metadata=None):
            calls.append(source)
            return super().__call__(source, language=language, metadata=metadata)

    highlight = feedback_page.FeedbackExporter.highlight_once(Counted(pygments_lexer="ipython3"), "ipython3")
    source = "x = np.zeros(3)\nprint(x)"
    first = highlight(source, metadata={"execution": {"iopub.status.busy": "2026-12-05T01:00:00Z"}})
    again = highlight(source, metadata={"execution": {"iopub.status.busy": "2026-12-05T02:00:00Z"}})
    assert first == again and calls == [source]
    bash = highlight("ls -l", metadata={"magics_language": "bash"})
    python = highlight("ls -l", metadata={})
    assert len(calls) == 3 and "hl-ipython3" in python
    assert bash == Highlight2HTML(pygments_lexer="ipython3")("ls -l", metadata={"magics_language": "bash"})


def test_a_second_feedback_exporter_compiles_no_template(monkeypatch):
    import jinja2

    from grading import feedback_page
    compiled = []
    original = jinja2.Environment.compile

    def counted(self, source, name=None, filename=None, raw=False, defer_init=False):
        compiled.append(name)
        return original(self, source, name, filename, raw, defer_init)

    monkeypatch.setattr(feedback_page, "_COMPILED_TEMPLATES", feedback_page.TemplatesCompiledOnce())
    monkeypatch.setattr(jinja2.Environment, "compile", counted)
    from nbformat.v4 import new_code_cell, new_notebook
    notebook = new_notebook(cells=[new_code_cell("1 + 1")])
    first, _ = feedback_page.FeedbackExporter().from_notebook_node(notebook)
    assert compiled, "the first exporter compiles its templates"
    compiled.clear()
    second, _ = feedback_page.FeedbackExporter().from_notebook_node(notebook)
    assert compiled == [] and second == first


def test_the_bench_fits_a_run_s_fixed_and_marginal_cost_and_plans_the_class_as_the_instructor_does():
    from course import tool

    from grading.course import landed_parts
    instructor = tool("instructor")
    bench = tool("bench_grading")
    parts = landed_parts()
    fixed, marginal = 4.5, 0.8
    for jobs in (1, 2):
        def seconds(runs: list[int]) -> float:  # what the bench would measure: jobs runs at a time
            return (len(runs) * fixed + sum(runs) * marginal) / jobs
        big, small = bench.runs_of(parts, 6, jobs), bench.runs_of(parts, jobs, jobs)
        assert len(small) == jobs
        assert bench.fit_runs(jobs, (seconds(big), big), (seconds(small), small)) == pytest.approx((fixed, marginal))
    runs = bench.class_runs(parts, 2)
    handed_in = {slug: [f"s{i}" for i in range(bench.CLASS)] for slug in parts}
    assert runs == [len(task.notebooks) for task in instructor.plan(handed_in, 2)]
    assert sum(runs) == bench.CLASS * len(parts)
