"""Grading v3's measurements: what decides a point is measured by the course, never reported.

- The kernel's module tree (grading/kernel_tree.py) holds every module a notebook imports, no working
  answer of the graded part, and no module of the visible tests' or the judge's.
- The meter (grading/meter.py) keeps its peak when the measured code resets tracemalloc's, stops it or
  clears its traces.
- Answers count only from a plain ``display_data`` message of the lesson's own test cell
  (grading/preprocessors/): an update, a display id, another cell or a second set is refused.
- The cluster's ledger records only what was sent; the grader tells a worker's result made of what it
  received from one computed from the inputs; inputs on which only the contract's order of the
  additions gives the right bits (grading/inputs.py) tell np.mean, sum(), the reversed and the
  pairwise orders apart.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
from nbformat import NotebookNode

from course import read, student_path
from grading.course import landed_parts
from grading import kernel_tree, meter
from grading.inputs import order_revealing_vectors
from grading.protocol import ANSWERS_MIME as MIME
from shared.answers import answers as _answers_decorator  # noqa: F401  (the marker the redaction reads)
from shared.lessons import lessons_of

PARTS = landed_parts()


# --------------------------------------------------------------------------
# The kernel's tree
# --------------------------------------------------------------------------

def _imported_modules(source: str) -> set[str]:
    tree = ast.parse(source)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(("shared", "grading")):
            found.add(node.module if node.module not in ("shared",) else "shared")
            if node.module == "shared":
                found.update(f"shared.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith(("shared", "grading")))
    return found


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return kernel_tree.build(PARTS[0], tmp_path_factory.mktemp("kernel") / "tree")


def test_the_tree_holds_every_module_a_notebook_imports(tree):
    wanted = set()
    for slug in PARTS:
        for cell in read(student_path(slug)).cells:
            if cell.cell_type == "code":
                wanted |= _imported_modules(cell.source)
    wanted |= {"grading.harness"}  # the hidden region's
    for module in sorted(wanted):
        path = tree.joinpath(*module.split("."))
        assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), module


def test_the_tree_holds_nothing_of_the_judge_the_reference_or_the_torch_extra(tree):
    present = {p.relative_to(tree).as_posix() for p in tree.rglob("*.py")}
    for absent in ("grading/judge.py", "grading/preprocessors/__init__.py", "grading/rules.py", "grading/sandbox.py",
                   "shared/policy.py"):
        assert absent not in present
    assert not any(p.startswith("grading/preprocessors") for p in present)
    assert not any(p.startswith(("solutions", "torch_extra")) or "mistakes/" in p or "real_" in p for p in present)


def test_the_visible_tests_modules_are_inert_stand_ins(tree):
    """Their names import (the set-up cell runs), but nothing in them computes."""
    for name in kernel_tree.VISIBLE_ONLY:
        source = (tree / "shared" / f"{name}.py").read_text()
        module = ast.parse(source)
        for node in ast.walk(module):
            if isinstance(node, ast.FunctionDef):
                body = node.body[-1]
                assert isinstance(body, (ast.Raise, ast.Return)) and len(node.body) == 1, (name, node.name)
                if isinstance(body, ast.Return):
                    assert isinstance(body.value, ast.Constant) and body.value.value is None
        assert "import" not in "\n".join(line for line in source.splitlines() if not line.startswith(('"""', "#")))


@pytest.mark.parametrize("slug", PARTS)
def test_every_function_that_answers_a_lesson_of_the_part_is_redacted_in_its_tree(slug, tmp_path):
    tree = kernel_tree.build(slug, tmp_path / "tree")
    codes = {lesson.code for lesson in lessons_of(slug)}
    for path in (tree / "shared").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef):
                continue
            marked = {arg.value for d in node.decorator_list if isinstance(d, ast.Call)
                      and getattr(d.func, "id", "") == "answers" for arg in d.args if isinstance(arg, ast.Constant)}
            if marked & codes:
                raises = [n for n in node.body if isinstance(n, ast.Raise)]
                assert raises and "HelperNotAllowed" in ast.unparse(raises[0]), (slug, path.name, node.name)


def test_a_kernel_importing_the_tree_gets_the_redacted_library(tmp_path):
    tree = kernel_tree.build(PARTS[0], tmp_path / "tree")
    code = ("from shared import mlp, mistakes, checking\n"
            "import numpy as np\n"
            "try:\n    mlp.forward(np.ones((1, 2)), mlp.init_params([2, 2], seed=0))\n"
            "except Exception as error:\n    print(type(error).__name__)\n"
            "try:\n    mistakes.mistakes_of('linear_forward')\n"
            "except Exception as error:\n    print(type(error).__name__)\n"
            "print(mlp.__file__.startswith(%r))\n" % str(tree))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})
    assert run.stdout.split() == ["HelperNotAllowed", "NotWhileGrading", "True"], run.stderr


def test_every_module_of_the_tree_imports_from_the_tree_alone(tree, tmp_path):
    """A module of the library that imports one the tree lacks would work in the learner's kernel and fail
    while grading (``shared.lessons`` reads ``shared.course_table``): each is imported from the tree, with
    the checkout's editable install out of the way."""
    names = sorted(f"{p.parent.name}.{p.stem}" for p in tree.glob("*/*.py") if p.stem != "__init__")
    code = ("import sys, importlib\n"
            "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
            f"for name in {names!r}:\n"
            "    module = importlib.import_module(name)\n"
            f"    assert module.__file__.startswith({str(tree)!r}), (name, module.__file__)\n"
            "print('imported', len(%r))\n" % names)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "MCT_GRADING": "1"})
    assert run.stdout.strip() == f"imported {len(names)}", run.stderr[-2000:]


@pytest.mark.parametrize("slug", PARTS)
def test_every_set_up_cell_runs_on_its_parts_tree(slug, tmp_path):
    """What a set-up cell imports (names included, not only modules) is in the tree it is graded with."""
    tree = kernel_tree.build(slug, tmp_path / "tree")
    setup = next(c.source for c in read(student_path(slug)).cells
                 if c.metadata.get("nbgrader", {}).get("grade_id") == "setup")
    run = subprocess.run([sys.executable, "-c", setup + "\nprint('set up')"], capture_output=True, text=True,
                         cwd=tmp_path, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "MCT_GRADING": "1"})
    assert run.stdout.strip().endswith("set up"), run.stderr[-2000:]
    assert "site-packages/matplotlib" not in run.stderr


# --------------------------------------------------------------------------
# The meter
# --------------------------------------------------------------------------

def _big_then_reset(reset):
    block = np.ones(2**20)  # 8 MiB
    del block
    reset()
    return np.ones(10)


@pytest.mark.parametrize("reset", [
    lambda: tracemalloc.reset_peak(), lambda: (tracemalloc.stop(), tracemalloc.start()),
    lambda: tracemalloc.clear_traces(),
    lambda: importlib.import_module("shared.memory").measure_peak_memory(lambda: None)],
    ids=["reset_peak", "stop and start", "clear_traces", "the helper's own measurement"])
def test_the_meter_keeps_its_peak_whatever_the_measured_code_does_to_tracemalloc(reset):
    with meter.Meter() as measured:
        _big_then_reset(reset)
    assert measured.peak_bytes >= 8 * 2**20
    assert not tracemalloc.is_tracing() and tracemalloc.reset_peak is meter._reset_peak  # all put back


def test_a_nested_measurement_still_measures_its_own_call():
    from shared.memory import measure_peak_memory
    with meter.Meter() as outer:
        inner = measure_peak_memory(lambda: np.ones(2**17))  # 1 MiB, after 8 MiB came and went
        _big_then_reset(lambda: None)
    assert 2**20 <= inner.peak_bytes < 2 * 2**20 and outer.peak_bytes >= 8 * 2**20


# --------------------------------------------------------------------------
# Answers: only from the lesson's own test cell, a plain display, once
# --------------------------------------------------------------------------

def _executor():
    from grading.preprocessors import SandboxedExecute
    executor = SandboxedExecute()
    executor._mct = {"answers": {}, "refused": []}
    return executor


def _test_cell(code="003", function="linear_forward"):
    return NotebookNode(cell_type="code", source="", outputs=[], metadata=NotebookNode(
        nbgrader={"grade": True, "grade_id": f"lesson_{code}_{function}", "points": 5}))


def _message(kind="display_data", lesson="003", display_id=None):
    content = {"data": {MIME: {"lesson": lesson, "status": "answered", "answers": []}, "text/plain": "[answers]"},
               "metadata": {}}
    if display_id:
        content["transient"] = {"display_id": display_id}
    return {"msg_type": kind, "header": {"msg_type": kind}, "parent_header": {"msg_id": "x"}, "content": content}


@pytest.mark.parametrize("message, cell, why", [
    (_message(kind="update_display_data", display_id="a"), _test_cell(), "update_display_data"),
    (_message(display_id="a"), _test_cell(), "display id"),
    (_message(kind="execute_result"), _test_cell(), "execute_result"),
    (_message(), NotebookNode(cell_type="code", source="", outputs=[], metadata=NotebookNode()), "not its test cell"),
    (_message(lesson="004"), _test_cell(), "from lesson 003's test cell"),
], ids=["an update", "a display id", "a result", "another cell", "another lesson's answers"])
def test_answers_come_only_as_a_new_display_of_their_own_test_cell(message, cell, why):
    executor = _executor()
    executor._take_answers(message, cell, 7)
    assert executor._mct["answers"] == {} and why in executor._mct["refused"][0][2]


def test_one_set_of_answers_counts_and_a_second_is_refused():
    executor = _executor()
    executor._take_answers(_message(), _test_cell(), 7)
    executor._take_answers(_message(), _test_cell(), 7)
    assert list(executor._mct["answers"]) == [7]
    assert "more than one set" in executor._mct["refused"][0][2]


def test_answers_never_reach_the_notebook():
    executor = _executor()
    executor.output = lambda outs, msg, display_id, cell_index: outs.append(msg["content"]["data"])
    executor.nb = NotebookNode(cells=[])
    cell = _test_cell()
    executor.process_message(_message(), cell, 0)
    assert cell.outputs == [{"text/plain": "[answers]"}] and MIME not in json.dumps(cell.outputs)


# --------------------------------------------------------------------------
# The cluster: what was sent, what was received
# --------------------------------------------------------------------------

def test_the_cluster_tells_what_a_worker_received_from_what_it_computed():
    from shared.cluster import Cluster
    cluster = Cluster(2)
    mine = np.arange(3.0)
    with cluster.round():
        cluster.send(0, 1, mine)
    got = cluster.receive(1, 0)
    assert cluster.holds_received(1, [got[1:]]) and not cluster.holds_received(1, got.copy())
    assert not cluster.holds_received(0, got)  # worker 0 received nothing


def _pairwise(arrays):
    if len(arrays) == 1:
        return arrays[0]
    half = len(arrays) // 2
    return _pairwise(arrays[:half]) + _pairwise(arrays[half:])


def _sum(arrays, order):
    total = arrays[order[0]]
    for rank in order[1:]:
        total = total + arrays[rank]
    return total


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("first_two", [lambda c: (c, c + 1), lambda c: (c + 1, c + 2)], ids=["028's", "035's"])
def test_order_revealing_inputs_tell_every_other_order_apart(dtype, first_two):
    rng = np.random.default_rng(0)
    for N in (3, 4, 5, 8):
        vectors = order_revealing_vectors(rng, N, 4 * N + 1, first_two, dtype)
        chunks = [np.array_split(vector, N) for vector in vectors]
        contract = [_sum([c[k] for c in chunks], [(first_two(k)[0] + i) % N for i in range(N)]) / N
                    for k in range(N)]
        stacked = np.stack(vectors)
        others = {"np.mean": np.mean(stacked, axis=0), "sum()": sum(vectors) / N,
                  "reversed": _sum(vectors, list(range(N))[::-1]) / N,
                  "pairwise": _pairwise(vectors) / N}
        right = np.concatenate(contract)
        assert np.all(np.isfinite(right))
        for name, other in others.items():
            assert not np.array_equal(other, right), (N, name)
