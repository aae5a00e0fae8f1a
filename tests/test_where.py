"""A learner's error points at the learner's line, never at the grader's internals (issue 42).

When a learner's graded function raises, the verdict (grading/judge.py, under "where:") and the visible
tests (shared/checking.py, ``CheckFailure``) say where, from ``shared.where``: the learner's cell by
its lesson, the line within the cell and its text, and outside the learner's code only a short name
("in the course's helper send", "inside NumPy"), never a file path of the grader, the course's modules
or the sandbox.

The learner's cells are compiled here as the kernel compiles them (ipykernel's own compiler: the
cell's file name and its lines in ``linecache``); the judge grades them in process, with the same
cases, harness and judge as a real run (``grade_in_process``).  ``tests/test_grade.py`` checks the
same through ``make grade``, in the sandbox.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from ipykernel.compiler import XCachingCompiler

from course import ROOT, reference_code
from grading.judge import grade_in_process, reference_function
from shared import checking
from shared.cluster import Cluster
from shared.lessons import lesson as find_lesson

# What a path of the grader, the course's modules, NumPy or the sandbox would show.
PATH_SIGNS = ("/shared/", "/grading/", "site-packages", "/tmp/", "ipykernel_", "/mct/", str(ROOT), 'File "')


def assert_no_path(text: str) -> None:
    for sign in PATH_SIGNS:
        assert sign not in text, f"{sign!r} in:\n{text}"
    assert not re.search(r"\.py\b", text), text


def as_cell(source: str, namespace: dict) -> None:
    """Run ``source`` as a notebook cell: compiled under the name the kernel gives it, its lines cached."""
    name = XCachingCompiler().cache(source)
    exec(compile(source, name, "exec"), namespace)  # noqa: S102 (the course's own code, changed as a learner would)


def learner_cell(code: str, slug: str, function: str, old: str, new: str) -> tuple[dict, str, int]:
    """The reference namespace of lesson ``code`` with its solution cell changed (``old`` -> ``new``, one
    line) and run as a cell; and that line's text and number in the cell."""
    source = reference_code(slug, function)
    assert source.count(old) == 1, old
    source = source.replace(old, new)
    namespace = dict(reference_function(find_lesson(code)).__globals__)
    as_cell(source, namespace)
    number = next(i for i, line in enumerate(source.splitlines(), 1) if new.strip() in line)
    return namespace, new.strip(), number


# --------------------------------------------------------------------------
# The hidden grading: the verdict's "where:"
# --------------------------------------------------------------------------

def test_a_learner_s_own_line_that_raises_is_named_by_its_lesson_s_cell_in_the_verdict():
    namespace, line, number = learner_cell(
        "035", "06_zero_sharding", "zero_optimizer_step",
        "        new_shards.append(shard)\n", "        new_shards.append(shard[rank + 1000])\n")
    verdict = grade_in_process("035", namespace)
    assert not verdict.passed and verdict.reason == "crash", verdict.message
    assert "IndexError" in verdict.message
    where = verdict.message.split("where:\n", 1)[1]
    assert where.startswith(f"    lesson 035's cell, line {number}, in zero_optimizer_step: {line}\n"), verdict.message
    assert_no_path(verdict.message)


def test_a_learner_s_call_that_fails_inside_a_course_helper_names_the_line_and_the_helper():
    """The issue's own slip: a collective's (result, traffic) taken as the result, so that a helper fails
    later; the learner's line that called it is named, then the helper, and what it said."""
    namespace, line, number = learner_cell(
        "035", "06_zero_sharding", "zero_optimizer_step",
        "    mean_grads, _ = reduce_scatter_mean(flat_grads, cluster)", "    mean_grads = reduce_scatter_mean(flat_grads, cluster)")
    verdict = grade_in_process("035", namespace)
    assert not verdict.passed and verdict.reason == "crash", verdict.message
    assert "'list' object has no attribute 'shape'" in verdict.message  # what the helper said
    assert re.search(r"    lesson 035's cell, line \d+, in zero_optimizer_step: shard, state = local_shard_adam_update\("
                     r".*\n    in the course's helper local_shard_adam_update\n", verdict.message), verdict.message
    assert_no_path(verdict.message)


def test_a_list_sent_on_the_grader_s_cluster_names_the_learner_s_line_and_the_cluster_s_refusal():
    namespace, line, number = learner_cell(
        "028", "05_data_parallel", "ring_all_reduce_mean",
        "                cluster.send(rank, (rank + 1) % n, chunks[rank][(rank - step) % n])",
        "                cluster.send(rank, (rank + 1) % n, list(chunks[rank][(rank - step) % n]))")
    verdict = grade_in_process("028", namespace)
    assert not verdict.passed and verdict.reason == "crash", verdict.message
    assert "send() sends NumPy arrays, got list" in verdict.message
    assert (f"    lesson 028's cell, line {number}, in ring_all_reduce_mean: {line}\n"
            f"    in the course's helper send\n") in verdict.message, verdict.message
    assert_no_path(verdict.message)


# --------------------------------------------------------------------------
# The visible tests: CheckFailure as the notebook shows it
# --------------------------------------------------------------------------

def rendered(failure: checking.CheckFailure) -> str:
    return "\n".join(failure._render_traceback_())


def test_the_visible_tests_name_the_learner_s_line_and_the_helper_it_called():
    namespace, line, number = learner_cell(
        "028", "05_data_parallel", "ring_all_reduce_mean",
        "                cluster.send(rank, (rank + 1) % n, chunks[rank][(rank - step) % n])",
        "                cluster.send(rank, (rank + 1) % n, list(chunks[rank][(rank - step) % n]))")
    arrays = [np.arange(6.0), np.ones(6)]
    with pytest.raises(checking.CheckFailure) as failed:
        checking.call(namespace["ring_all_reduce_mean"], arrays, Cluster(2))
    text = rendered(failed.value)
    assert "send() sends NumPy arrays, got list" in text
    assert (f"Where, in your code:\n  lesson 028's cell, line {number}, in ring_all_reduce_mean: {line}\n"
            f"  in the course's helper send") in text, text
    assert_no_path(text)


def test_the_visible_tests_name_numpy_by_name_only():
    namespace: dict = {"np": np}
    as_cell("def relu_forward(Z):\n    return np.array_split(Z, 0)\n", namespace)  # NumPy's own Python refuses
    with pytest.raises(checking.CheckFailure) as failed:
        checking.call(namespace["relu_forward"], np.ones((2, 3)))
    text = rendered(failed.value)
    assert ("Where, in your code:\n  lesson 004's cell, line 2, in relu_forward: return np.array_split(Z, 0)\n"
            "  inside NumPy") in text, text
    assert_no_path(text)
