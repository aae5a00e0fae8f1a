"""The helper package: lesson catalogue, progress/XP, memory meter, data, checking helpers,
the answer lock (shared/answers.py) and the helper versions of lesson functions (shared/lesson_blocks.py)."""

import ast
import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from course import ROOT, master_headings, tagged
from grading.course import reference_module
from grading.judge import lesson_spec, lesson_specs, reference_function
from grading.spec import Case, Raises, draw_cases
from shared import answers, lesson_blocks, lessons, memory, progress
from shared.checking import CheckFailure, difference, expect_error


def test_the_table_holds_every_lesson_the_masters_write_at_five_xp_each():
    headings = master_headings()
    codes = [code for part_codes in headings.values() for code in part_codes]
    assert len(lessons.LESSONS) == len(codes) and lessons.TOTAL_POINTS == 5 * len(codes)
    assert [l.code for l in lessons.LESSONS] == codes == [f"{n:03d}" for n in range(1, len(codes) + 1)]
    assert [p.slug for p in lessons.PARTS] == list(headings)
    assert [len(lessons.lessons_of(p.number)) for p in lessons.PARTS] == [len(c) for c in headings.values()]
    assert lessons.lesson("003").heading == "## 003 · Linear forward"
    assert lessons.lesson(40).function == "full_distributed_training_loop"
    assert lessons.lesson("lesson_003_linear_forward").function == "linear_forward"


def test_lesson_passed_records_xp_and_says_so(progress_file, capsys):
    progress.lesson_passed("003")
    progress.lesson_passed("003")  # passing twice counts once
    progress.lesson_passed(7)
    assert json.loads(progress_file.read_text()) == {"visible": {"003": True, "007": True}}
    assert progress.xp() == 10
    assert "Part 1: 10/50 XP" in capsys.readouterr().out.splitlines()[-1]


def test_grading_never_writes_progress(progress_file, monkeypatch, capsys):
    monkeypatch.setenv("MCT_GRADING", "1")
    progress.lesson_passed("001")
    assert not progress_file.exists()


def test_damaged_progress_file_counts_as_no_progress(progress_file):
    progress_file.write_text("{not json")
    assert progress.passed_lessons() == set()
    progress.lesson_passed("002")
    assert progress.passed_lessons() == {"002"}


def test_a_lesson_state_is_its_latest_result(progress_file):
    progress.lesson_passed("003")
    progress.record_failure("003")
    assert progress.passed_lessons() == set() and progress.visible_results() == {"003": False}
    panel = progress.ProgressPanel("01_mlp_core")
    assert "[✗] 003" in repr(panel) and "✗" in panel._repr_html_()
    assert "failed" in progress.report().splitlines()[4]
    progress.lesson_passed("003")
    assert progress.passed_lessons() == {"003"}


def test_panel_and_report_show_ticks_and_xp(progress_file):
    progress.lesson_passed("001")
    panel = progress.ProgressPanel("01_mlp_core")
    assert "5/50 XP" in repr(panel) and "[✓] 001" in repr(panel) and "[ ] 002" in repr(panel)
    html = panel._repr_html_()
    assert "✓" in html and not any(emoji in html for emoji in "✅⬜")  # no emoji font needed
    report = progress.report()
    total, count = lessons.TOTAL_POINTS, len(lessons.LESSONS)
    assert report.count("passed") == 1 and f"XP from the visible tests: 5/{total}  (1/{count} lessons)" in report
    assert report.endswith(f"graded XP (make grade):    0/{total}  (not graded yet: run `make grade`)")
    assert len([line for line in report.splitlines() if re.match(r"  \d{3} ", line)]) == count


def test_report_keeps_graded_xp_apart_from_the_visible_tests(progress_file):
    progress.lesson_passed("001")
    progress.record_graded({"001": False, "003": True})
    report = progress.report()
    lines = {line.split()[0]: line for line in report.splitlines() if line.startswith("  0")}
    assert "passed" in lines["001"] and "0 pts" in lines["001"]
    assert "passed" not in lines["003"] and "earned" in lines["003"]
    assert f"XP from the visible tests: 5/{lessons.TOTAL_POINTS}" in report
    assert report.endswith(f"graded XP (make grade):    5/{lessons.TOTAL_POINTS}")
    assert progress.passed_lessons() == {"001"}  # grading records no visible-test pass


def test_progress_command_prints_every_lesson(progress_file):
    out = subprocess.run([sys.executable, "-m", "shared.progress"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert f"XP from the visible tests: 0/{lessons.TOTAL_POINTS}" in out and f"graded XP (make grade):    0/{lessons.TOTAL_POINTS}" in out
    assert all(item.code in out for item in lessons.LESSONS)


def test_memory_meter_sees_numpy_allocations():
    measured = memory.measure_peak_memory(np.ones, 10**6)
    assert 8_000_000 <= measured.peak_bytes < 8_100_000
    assert measured.retained_bytes >= 8_000_000
    assert measured.result.shape == (10**6,)
    measured = memory.measure_peak_memory(lambda: float(np.ones(10**6).sum()))
    assert measured.peak_bytes >= 8_000_000 and measured.retained_bytes < 10_000


def test_memory_meter_leaves_the_collector_as_found_and_still_frees_the_calls_garbage(monkeypatch):
    """measure_peak_memory freezes older objects while it measures (for speed), then unfreezes them;
    a reference cycle the call makes and drops is garbage, collected before 'what the result keeps'.
    A process frozen for good (the grading child) stays frozen."""
    import gc

    def drop_a_cycle():
        cycle = [np.ones(10**6)]
        cycle.append(cycle)
    measured = memory.measure_peak_memory(drop_a_cycle)
    assert gc.get_freeze_count() == 0
    assert measured.peak_bytes >= 8_000_000 and measured.retained_bytes < 10_000
    monkeypatch.setattr(memory, "_frozen_for_good", False)  # put back after the test
    memory.freeze_for_good()
    try:
        assert memory.measure_peak_memory(drop_a_cycle).retained_bytes < 10_000
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_format_bytes():
    assert memory.format_bytes(512) == "512 B"
    assert memory.format_bytes(3 * 2**20) == "3.0 MiB"


def test_expect_error_requires_the_right_exception():
    def accepts_anything(n):
        return n
    def rejects(n):
        raise ValueError("n must be positive")
    expect_error(rejects, [0], ["n"], ValueError, "n is 0")
    with pytest.raises(CheckFailure, match="should raise ValueError when n is 0"):
        expect_error(accepts_anything, [0], ["n"], ValueError, "n is 0")


def test_plot_helper_draws_a_log_loss_curve():
    import matplotlib
    matplotlib.use("Agg")
    from shared.plotting import plot_loss_curve
    ax = plot_loss_curve([3.0, 2.0, 1.0])
    assert ax.get_yscale() == "log" and len(ax.lines) == 1


def test_plot_helper_draws_each_workers_chunks_frame_by_frame():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from shared.plotting import plot_worker_chunks
    frames = [("start", [["0", "0"], ["1", "1"]], [0, 1]),
              ("after 1", [["(1+0)/2", "0"], ["1", "new"]], None)]
    _, ax = plt.subplots()
    plot_worker_chunks(ax, frames, worker_titles=["worker 0", "worker 1"], left_margin=3.0)
    assert len(ax.patches) == 2 * 2 * 2  # a box a chunk, per worker, per frame
    assert [patch.get_linewidth() for patch in ax.patches[:4]] == [2.4, 0.4, 0.4, 2.4]  # what each worker sends next
    texts = [text.get_text() for text in ax.texts]
    assert texts[:4] == ["0", "0", "1", "1"] and texts[4] == "start"
    assert "1+0\n÷ 2" in texts and "p1\nnew" in texts and texts[-2:] == ["worker 0", "worker 1"]
    assert ax.get_xlim()[0] == -3.0 and not ax.axison
    plt.close("all")


# --------------------------------------------------------------------------
# shared.mlp in float16 (Part 4): no silent upcast, sums accumulated in float32
# --------------------------------------------------------------------------

@pytest.mark.part_4
def test_the_mlp_computes_in_float16_without_upcasting():
    from shared import mlp
    rng = np.random.default_rng(0)
    params64 = mlp.init_params([4, 8, 8, 2], seed=0)
    params = {key: value.astype(np.float16) for key, value in params64.items()}
    X, Y = rng.standard_normal((16, 4)), rng.standard_normal((16, 2))
    out, cache = mlp.forward(X.astype(np.float16), params)
    assert out.dtype == np.float16 and {value.dtype for value in cache.values()} == {np.dtype(np.float16)}
    loss, d_out = mlp.mse_loss_and_grad(out, Y.astype(np.float16))
    assert type(loss) is float and d_out.dtype == np.float16
    grads = mlp.backward(d_out, params, cache)
    assert {value.dtype for value in grads.values()} == {np.dtype(np.float16)}
    assert {value.dtype for value in mlp.sgd_update(params, grads, 0.1).values()} == {np.dtype(np.float16)}
    # the same numbers as float64, to float16's precision
    loss64, grads64 = mlp.loss_and_grads(X, Y, {key: value.astype(np.float64) for key, value in params.items()})
    assert loss == pytest.approx(loss64, rel=1e-2)
    for key in grads:
        assert np.allclose(grads[key], grads64[key], rtol=2e-2, atol=1e-3), key


@pytest.mark.part_4
def test_float16_sums_are_accumulated_in_float32():
    from shared import mlp
    d = np.full((4096, 3), 0.1, dtype=np.float16)
    assert d.sum(axis=0)[0] == 256  # NumPy alone: float16 rows added one by one stall at 256
    params = {"W1": np.zeros((2, 3), dtype=np.float16), "b1": np.zeros(3, dtype=np.float16)}
    grads = mlp.backward(d, params, {"A0": np.ones((4096, 2), dtype=np.float16)})
    assert grads["b1"].dtype == np.float16 and np.all(grads["b1"] == np.float16(409.5))
    assert np.all(grads["W1"] == np.float16(409.5))  # NumPy's float16 matrix product accumulates in float32
    # the loss of many entries: its count (70000) and its squares (300**2) are beyond float16's range
    loss, d_out = mlp.mse_loss_and_grad(np.full((70000, 1), 300.0, dtype=np.float16), np.zeros((70000, 1), np.float16))
    assert loss == 90000.0
    assert d_out.dtype == np.float16 and np.all(d_out == np.float16(600.0 / 70000))


@pytest.mark.part_4
def test_float64_and_float32_mlp_arithmetic_is_unchanged():
    from shared import mlp
    rng = np.random.default_rng(1)
    for dtype in (np.float64, np.float32):
        Y_hat, Y = rng.standard_normal((7, 3)).astype(dtype), rng.standard_normal((7, 3)).astype(dtype)
        loss, grad = mlp.mse_loss_and_grad(Y_hat, Y)
        diff = Y_hat - Y
        assert loss == float(np.mean(diff ** 2)) and np.array_equal(grad, 2.0 * diff / diff.size)
        assert grad.dtype == dtype
        params = {key: value.astype(dtype) for key, value in mlp.init_params([3, 4, 3], seed=2).items()}
        out, cache = mlp.forward(Y_hat, params)
        grads = mlp.backward(grad, params, cache)
        assert np.array_equal(grads["b2"], grad.sum(axis=0)) and grads["b2"].dtype == dtype


# --------------------------------------------------------------------------
# shared.answers: a helper that answers a lesson refuses to run while it is graded
# --------------------------------------------------------------------------

@answers.answers("005")
def _answers_005(x):
    """A stand-in helper that computes lesson 005's answer."""
    return x + 1


@answers.answers("010", "017")
def _answers_010_and_017(x):
    return x * 2


def test_a_marked_helper_runs_until_its_lesson_is_locked():
    assert _answers_005(1) == 2
    try:
        answers.lock("005")
        with pytest.raises(answers.HelperNotAllowed, match="lesson 005") as info:
            _answers_005(1)
        assert "_answers_005" in str(info.value) and "write the lesson's function yourself" in str(info.value)
        assert _answers_010_and_017(1) == 2  # another lesson's helper still runs
    finally:
        answers.unlock()
    assert _answers_005(1) == 2


def test_a_helper_of_several_lessons_is_locked_by_each_of_them():
    for code in ("010", "017"):
        try:
            answers.lock(code)
            with pytest.raises(answers.HelperNotAllowed, match=f"lesson {code}"):
                _answers_010_and_017(3)
        finally:
            answers.unlock()
    assert _answers_010_and_017(3) == 6


def test_the_lock_has_no_way_around_it():
    assert not hasattr(_answers_005, "__wrapped__")  # no undecorated original to call instead
    assert _answers_005.answers_lessons == ("005",)
    assert _answers_005.__name__ == "_answers_005" and "lesson 005" in _answers_005.__doc__
    assert issubclass(answers.HelperNotAllowed, RuntimeError)


def test_the_lock_lives_in_the_process_that_took_it():
    """As in grading: the lesson's forked child locks, the kernel (the parent) stays unlocked."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: lock, try the helper, report, and end here whatever happens
        status = 1
        try:
            answers.lock("005")
            try:
                _answers_005(1)
            except answers.HelperNotAllowed:
                status = 0
            os.write(write, b"refused" if status == 0 else b"ran")
        finally:
            os._exit(status)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    said = os.read(read, 100)
    os.close(read)
    assert os.waitstatus_to_exitcode(status) == 0 and said == b"refused"
    assert _answers_005(1) == 2  # never locked here


def test_the_helper_package_marks_the_functions_that_answer_lessons():
    from shared import data, mlp
    assert mlp.forward.answers_lessons == ("005",)
    assert set(mlp.backward.answers_lessons) == {"010", "017"}
    assert data.make_regression_batch.answers_lessons == ("001",)
    try:
        answers.lock("005")
        with pytest.raises(answers.HelperNotAllowed):
            mlp.forward(np.ones((2, 3)), mlp.init_params([3, 2, 1], seed=0))
    finally:
        answers.unlock()


# --------------------------------------------------------------------------
# shared.lesson_blocks: the helper's versions of lesson functions equal the references
# --------------------------------------------------------------------------

def _blocks():
    """(name, block, lesson) for every function of shared/lesson_blocks.py."""
    found = []
    for name, block in vars(lesson_blocks).items():
        if callable(block) and getattr(block, "__module__", "") == lesson_blocks.__name__:
            codes = getattr(block, "answers_lessons", ())
            assert len(codes) == 1, f"lesson_blocks.{name} should answer exactly one lesson, it answers {codes}"
            lesson = lessons.lesson(codes[0])
            found.append(pytest.param(name, block, lesson, id=name, marks=tagged(lesson).marks))
    return found


BLOCKS = _blocks()


def test_every_isolated_function_has_a_block():
    from grading.course import landed_parts
    isolated = {name for slug in landed_parts() for spec in lesson_specs(slug).values() for name in spec.isolate}
    assert isolated <= {param.values[0] for param in BLOCKS}


def _function_source(path, name):
    """The text of the top-level function ``name`` in the module at ``path``, without its decorators."""
    text = Path(path).read_text()
    node = next(node for node in ast.parse(text).body if isinstance(node, ast.FunctionDef) and node.name == name)
    return ast.get_source_segment(text, node)


@pytest.mark.parametrize("name, block, lesson", BLOCKS)
def test_a_block_is_the_reference_function_of_its_lesson(name, block, lesson):
    if name != lesson.function:
        # A helper that the lesson's cell defines beside the lesson's function (LessonSpec.helpers): the reference
        # module's code, to the letter (what it computes is tested with its part's reference).
        assert name in lesson_spec(lesson.code).helpers
        assert _function_source(lesson_blocks.__file__, name) == _function_source(reference_module(lesson.part.slug),
                                                                                   name)
        return
    reference = reference_function(lesson)
    spec = lesson_spec(lesson.code)
    for seed in (0, 1, 2):
        for index, case in enumerate(draw_cases(spec, seed)):
            where = f"seed {seed}, case {index + 1} ({case.about})"
            args = list(case.args.values())
            if isinstance(case, Raises):
                with pytest.raises(case.error):
                    block(*copy.deepcopy(args))
                continue
            assert isinstance(case, Case)
            expected = reference(*copy.deepcopy(args))
            message = difference(block(*copy.deepcopy(args)), expected, name, **spec.tolerances(case))
            assert message is None, f"{where}: {message}"


def test_an_untouched_stub_and_a_missing_function_are_explained_not_traced(capsys):
    """In IPython, a test cell run on the stub says "Not started" and names the lesson; one run
    before its implementation cell says which cell to run."""
    from IPython.core.interactiveshell import InteractiveShell

    from shared.notebook import setup_notebook
    shell = InteractiveShell.instance()
    try:
        setup_notebook()
        shell.run_cell("def relu_forward(z):\n    raise NotImplementedError('Replace this line')\n")
        shell.run_cell("relu_forward(1.0)")
        out = capsys.readouterr().out
        assert "Not started:" in out and "lesson 004 · ReLU forward" in out and "Traceback" not in out
        assert shell.last_execution_result is None or not shell.last_execution_result.success
        shell.run_cell("del relu_forward")
        shell.run_cell("relu_forward(1.0)")
        out = capsys.readouterr().out
        assert "is not defined yet: run the Implementation cell of lesson 004" in out
    finally:
        InteractiveShell.clear_instance()


def test_a_skeleton_with_a_step_left_says_which_step(capsys):
    """A solution cell with one stub per step (several solution regions): the test cell names the step
    that still raises, "Not started" at the first, "Not finished" at a later one."""
    from IPython.core.interactiveshell import InteractiveShell

    from shared.notebook import setup_notebook
    stub = '    # YOUR CODE HERE\n    raise NotImplementedError("Not implemented yet: replace this line with your code.")\n'
    shell = InteractiveShell.instance()
    try:
        setup_notebook()
        shell.run_cell(f"def relu_forward(z):\n    # Step 1 · copy\n{stub}    # Step 2 · clip\n{stub}")
        shell.run_cell("relu_forward(1.0)")
        out = capsys.readouterr().out
        assert "Not started:" in out and "step 1 of 2" in out and "Traceback" not in out
        shell.run_cell(f"def relu_forward(z):\n    # Step 1 · copy\n    y = z\n    # Step 2 · clip\n{stub}")
        shell.run_cell("relu_forward(1.0)")
        out = capsys.readouterr().out
        assert "Not finished:" in out and "step 2 of 2" in out and "lesson 004 · ReLU forward" in out
        # A step in a function of the cell that the lesson's function calls (035's reduce_scatter_mean): the
        # lesson's, counted with the cell's steps
        helper = f"def reduce_scatter_mean(v, c):\n    # Step 1 · rounds\n{stub}\n\n"
        shell.run_cell(f"{helper}def zero_optimizer_step(p):\n    m = reduce_scatter_mean(p, None)\n"
                       f"    # Step 2 · update\n{stub}")
        shell.run_cell("zero_optimizer_step(1.0)")
        out = capsys.readouterr().out
        assert "Not started:" in out and "`zero_optimizer_step`" in out and "step 1 of 2" in out
        assert "lesson 035" in out and "Traceback" not in out
        shell.run_cell(f"def reduce_scatter_mean(v, c):\n    # Step 1 · rounds\n    return v\n\n\n"
                       f"def zero_optimizer_step(p):\n    m = reduce_scatter_mean(p, None)\n    # Step 2 · update\n{stub}")
        shell.run_cell("zero_optimizer_step(1.0)")
        out = capsys.readouterr().out
        assert "Not finished:" in out and "step 2 of 2" in out and "lesson 035" in out
    finally:
        InteractiveShell.clear_instance()


def test_sgd_update_refuses_gradients_that_do_not_match_the_parameters():
    """A gradient dict with missing, extra or mis-shaped entries is named, never half-applied or broadcast."""
    from shared import mlp
    params = mlp.init_params([3, 4, 2], seed=0)
    grads = {key: np.ones_like(value) for key, value in params.items()}
    assert set(mlp.sgd_update(params, grads, 0.1)) == set(params)
    with pytest.raises(ValueError, match=r"missing \['b2'\], unexpected \[\]"):
        mlp.sgd_update(params, {key: g for key, g in grads.items() if key != "b2"}, 0.1)
    with pytest.raises(ValueError, match=r"unexpected \['W3'\]"):
        mlp.sgd_update(params, {**grads, "W3": np.ones(2)}, 0.1)
    with pytest.raises(ValueError, match=r"grads\['b1'\] has shape \(1, 4\), but params\['b1'\] has shape \(4,\)"):
        mlp.sgd_update(params, {**grads, "b1": np.ones((1, 4))}, 0.1)


def test_helpers_that_answer_a_lesson_show_their_real_arguments():
    """A locked helper (``@answers``) reads in help() and the notebook's tooltip with its own arguments and
    docstring, not ``(*args, **kwargs)``, and still has no ``__wrapped__`` leading around its lock."""
    import importlib
    import inspect

    found = 0
    for name in ("mlp", "data", "cluster", "memory", "lesson_blocks", "training"):
        module = importlib.import_module(f"shared.{name}")
        for function in vars(module).values():
            if callable(function) and getattr(function, "answers_lessons", None) \
                    and function.__module__ == module.__name__:
                found += 1
                kinds = {p.kind for p in inspect.signature(function).parameters.values()}
                assert not kinds & {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}, \
                    f"{name}.{function.__name__}{inspect.signature(function)}"
                assert function.__doc__ and not hasattr(function, "__wrapped__"), function.__name__
    assert found >= 20
