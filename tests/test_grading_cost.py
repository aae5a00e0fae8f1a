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
  compiles the page's templates once, not once per nbgrader command;
- the feedback pages' check (tools/instructor.py's ``active_html``) finds what one reading of the whole page
  finds, and parses again only the lines of a page that earlier pages did not hold.
"""

from __future__ import annotations

import json
import re
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
        big, small = bench.runs_of(parts, 6, jobs), bench.runs_of(parts, jobs, jobs)
        assert len(small) == jobs
        measured = [(bench.wall_seconds(runs, fixed, marginal, jobs), runs) for runs in (big, small)]
        assert bench.fit_runs(jobs, *measured) == pytest.approx((fixed, marginal))
    handed_in = {slug: [f"s{i}" for i in range(bench.CLASS)] for slug in parts}
    for step, per_run in (("autograde", instructor.NOTEBOOKS_PER_RUN), ("feedback", instructor.PAGES_PER_RUN)):
        runs = bench.runs_of(parts, bench.CLASS, 2, step)
        assert runs == [len(task.notebooks) for task in instructor.plan(handed_in, 2, per_run)]
        assert sum(runs) == bench.CLASS * len(parts)
    assert len(bench.runs_of(parts, bench.CLASS, 2, "feedback")) < len(bench.runs_of(parts, bench.CLASS, 2))


def test_the_bench_says_how_much_faster_jobs_2_could_be_from_the_cpu_time_both_used(monkeypatch):
    from course import tool
    bench = tool("bench_grading")
    monkeypatch.setattr(bench.os, "cpu_count", lambda: 2)
    rows = [("plain nbgrader", "autograde", 1, 30.0, 0.5, 0, 0), ("course grading", "autograde", 1, 10.0, 0.53, 0, 0),
            ("course grading", "autograde", 2, 6.0, 0.9, 0, 0), ("course grading", "feedback", 2, 1.0, 1.0, 0, 0)]
    said = bench.speedup_bound(rows, "course grading", "autograde")
    # 10 s with 1.06 CPUs busy: 10.6 CPU-seconds, at least 5.3 s on two CPUs; 6 s with 1.8 busy: 10.8
    assert said == ("course grading, autograde: JOBS=1 kept 1.06 CPUs busy, so with the same work JOBS=2 could be "
                    "at most 1.89x faster on 2 CPUs; it did 1.02x JOBS=1's CPU work, with 1.80 CPUs busy, "
                    "and is 1.67x faster")
    monkeypatch.setattr(bench.os, "cpu_count", lambda: 4)  # JOBS=2 runs two at a time, whatever the CPUs
    assert "at most 1.89x faster on 4 CPUs" in bench.speedup_bound(
        [(*row[:4], row[4] / 2, 0, 0) for row in rows], "course grading", "autograde")


def test_the_bench_gives_the_speed_up_of_each_pair_of_runs_and_their_median(monkeypatch):
    from course import tool
    bench = tool("bench_grading")
    monkeypatch.setattr(bench.os, "cpu_count", lambda: 2)
    # (seconds, share of the CPUs busy) at JOBS=1, then at JOBS=2: 10/6, 12/6, 9/6; JOBS=1 kept 1.0, 1.25, 1.1 busy
    pairs = [((10.0, 0.5), (6.0, 0.9)), ((12.0, 0.625), (6.0, 0.95)), ((9.0, 0.55), (6.0, 0.8))]
    assert bench.speedup_spread(pairs) == (
        "course grading, autograde: JOBS=2 / JOBS=1 in 3 pair(s) of runs, one after the other: "
        "1.67x (at most 2.00x), 2.00x (at most 1.60x), 1.50x (at most 1.82x); median 1.67x (at most 1.82x)")
    assert "in 1 pair(s)" in bench.speedup_spread(pairs[:1]) and "median 1.67x" in bench.speedup_spread(pairs[:1])


def test_the_bench_grades_a_whole_class_and_prints_the_minutes_it_measured(capsys):
    from course import tool
    bench = tool("bench_grading")
    assert bench.main(["--whole-class", "1", "--parts", "01_mlp_core"]) == 0
    printed = capsys.readouterr().out
    steps = dict(re.findall(r"^  (autograde|feedback): ([0-9.]+) min", printed, re.M))
    assert set(steps) == {"autograde", "feedback"}, printed
    total = re.search(r"^measured: a class of 1 x 1 parts graded with feedback at JOBS=2 in ([0-9.]+) min$",
                      printed, re.M)
    assert total and float(total[1]) == pytest.approx(sum(map(float, steps.values())), abs=0.11), printed


def test_the_page_check_reads_a_line_at_a_time_what_it_reads_whole_and_parses_a_repeated_line_once(monkeypatch):
    from html.parser import HTMLParser

    from course import formgrader_page, read, tool
    from hostile import hostile

    from grading.course import landed_parts
    instructor = tool("instructor")
    release = read(ROOT / "notebooks" / f"{landed_parts()[0]}.ipynb")
    unsanitized = hostile(release)
    unsanitized.cells[-1]["id"] = "plain"  # (nbconvert refuses to render a forged id at all)
    pages = [formgrader_page(release), formgrader_page(unsanitized, course=False)]
    rng = np.random.default_rng(44)
    for _ in range(24):  # cut anywhere and joined: inside a tag, an attribute, a comment, a script
        first, second = (pages[int(i)] for i in rng.integers(0, 2, size=2))
        pages.append(first[:rng.integers(len(first))] + second[rng.integers(len(second)):])

    def whole(page: str) -> list[str]:
        parser = instructor._ActiveHTML()
        parser.feed(page)
        return sorted(set(parser.found))

    monkeypatch.setattr(instructor, "_READ_LINES", {})
    assert whole(pages[1]), "the hostile page has active HTML to find"
    for page in pages + pages[::-1]:
        assert instructor.active_html(page) == whole(page)
    expected, fed = whole(pages[0]), []
    monkeypatch.setattr(instructor._ActiveHTML, "feed",
                        lambda self, data: (fed.append(data), HTMLParser.feed(self, data)))
    assert instructor.active_html(pages[0]) == expected
    lines = pages[0].count("\n")
    assert lines > 100 and len(fed) < lines / 20, f"a page read before is parsed again: {len(fed)} of {lines} lines"


def run_to_end(coroutine):
    """Drive a coroutine that awaits nothing real to its end (asyncio.run fails in a pytest worker where an
    earlier test left an event loop running)."""
    try:
        coroutine.send(None)
    except StopIteration as end:
        return end.value
    raise AssertionError("the coroutine waited for something real: everything it awaits here is scripted")


def test_a_killed_kernel_s_end_is_looked_for_every_few_milliseconds_not_every_100(monkeypatch):
    import asyncio

    from grading.preprocessors import kernelmanager
    from jupyter_client.manager import KernelManager
    manager = kernelmanager.SandboxKernelManager()
    looks, slept = iter([True, True, False]), []

    async def alive():
        return next(looks)

    async def sleep(seconds):
        slept.append(seconds)

    monkeypatch.setattr(manager, "_async_is_alive", alive)
    monkeypatch.setattr(asyncio, "sleep", sleep)
    run_to_end(manager._async_wait())
    assert slept == [kernelmanager.END_POLL_SECONDS] * 2 and kernelmanager.END_POLL_SECONDS <= 0.005
    # ... and jupyter_client's kill still waits through this method (its own default looks every 100 ms)
    import inspect
    assert "self._async_wait()" in inspect.getsource(KernelManager._async_kill_kernel)


class ScriptedChannel:
    """A channel that hands out the messages given, in order, then says Empty (after no wait at all)."""

    def __init__(self, messages):
        self.messages, self.read = list(messages), 0

    async def get_msg(self, timeout=None):
        from queue import Empty
        if self.read == len(self.messages):
            raise Empty
        self.read += 1
        return self.messages[self.read - 1]


def kernel_message(msg_type, parent="", **content):
    return {"msg_type": msg_type, "parent_header": {"msg_id": parent} if parent else {}, "content": content}


def scripted_client(shell, iopub):
    from grading.preprocessors.kernelmanager import SandboxKernelClient

    class Scripted(SandboxKernelClient):
        shell_channel = iopub_channel = None  # plain attributes in place of the channels' properties
        asked = 0

        def kernel_info(self):
            self.asked += 1
            return f"request-{self.asked}"

        async def _async_is_alive(self):
            return True

    client = Scripted()
    client.shell_channel, client.iopub_channel = ScriptedChannel(shell), ScriptedChannel(iopub)
    return client


def test_a_kernel_is_ready_at_its_idle_for_kernel_info_without_waiting_for_silence():
    """jupyter_client ends its wait for a kernel with a fifth of a second of silence on the output channel;
    the course's client ends it at the kernel's idle for the request it answered, everything before read."""
    shell = [kernel_message("kernel_info_reply", "request-1", status="ok", protocol_version="5.4")]
    iopub = [kernel_message("iopub_welcome"), kernel_message("status", execution_state="starting"),
             kernel_message("status", "request-1", execution_state="busy"),
             kernel_message("status", "request-1", execution_state="idle"),
             kernel_message("stream", "later", name="stdout", text="not the start's")]
    client = scripted_client(shell, iopub)
    run_to_end(client.wait_for_ready(timeout=5))
    assert client.asked == 1
    assert client.iopub_channel.read == 4  # up to the idle and no further: the next message is not the start's


def test_a_kernel_whose_output_channel_missed_the_idle_is_asked_again():
    """A reply whose idle never comes (the output channel connected too late) is asked again, as jupyter_client
    asks again; ready only once an idle for an answered request arrived."""
    shell = [kernel_message("kernel_info_reply", f"request-{n}", protocol_version="5.4") for n in (1, 2)]
    client = scripted_client(shell, [])
    later = [kernel_message("status", "request-2", execution_state="busy"),
             kernel_message("status", "request-2", execution_state="idle")]

    async def wait():
        first = client.iopub_channel.get_msg

        async def connected_after_the_first_request(timeout=None):
            if client.asked == 2:
                client.iopub_channel.messages += later
                client.iopub_channel.get_msg = first
            return await first(timeout)
        client.iopub_channel.get_msg = connected_after_the_first_request
        await client.wait_for_ready(timeout=5)
    run_to_end(wait())
    assert client.asked == 2 and client.iopub_channel.read == 2


def test_a_reference_module_imports_only_what_its_solutions_use(tmp_path):
    """The judge loads a part's reference solutions in every grading run: the set-up cell's matplotlib (a second
    to import, for plots) is not imported with them."""
    probe = ("import sys; from grading.course import reference_function; from shared.lessons import lessons_of\n"
             "for lesson in lessons_of('07_memory_accounting'): reference_function(lesson)\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'IPython'}))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]"


def test_an_import_is_cut_to_the_names_the_code_reads():
    import ast

    sys.path.insert(0, str(ROOT / "tools"))
    import build
    setup = ("import numpy as np\nimport matplotlib.pyplot as plt\nimport os.path\n"
             "from shared.memory import (format_bytes, BYTES_PER_NUMBER,\n    measure_peak_memory)\n"
             "from shared.dtypes import *\n")
    nodes = [node for node in ast.parse(setup).body]
    for node in nodes:
        node.source = ast.get_source_segment(setup, node)
    code = "def f(x):\n    return np.asarray(x) * BYTES_PER_NUMBER + len(os.path.sep)\n"
    assert build.imports_used(nodes, code) == ["import numpy as np", "import os.path",
                                               "from shared.memory import BYTES_PER_NUMBER",
                                               "from shared.dtypes import *"]
    long = "from m import " + ", ".join(f"name_{i:03d}" for i in range(30))
    wrapped = build.wrapped_import(long)
    assert all(len(line) <= 120 for line in wrapped.splitlines()) and len(wrapped.splitlines()) > 1
    assert ast.dump(ast.parse(wrapped)) == ast.dump(ast.parse(long))


def test_a_grading_kernel_starts_without_a_debugger(tmp_path):
    """ipykernel imports debugpy as it starts whenever it can (a tenth of a second, and a socket for a debugger):
    on the kernel's tree it cannot, and ipykernel goes on without one."""
    tree = kernel_tree.build("01_mlp_core", tmp_path / "tree")
    probe = ("import sys\nfrom ipykernel.debugger import _is_debugpy_available\n"
             "from ipykernel.ipkernel import IPythonKernel\n"
             "print(_is_debugpy_available, sorted(m for m in sys.modules if m.split('.')[0] in ('debugpy', 'pydevd')))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "MCT_GRADING": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "False []"
    outside = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                             env={"PATH": "/usr/bin:/bin"})
    assert outside.stdout.startswith("True")  # the probe sees the difference: the venv has debugpy


def test_the_growth_watch_has_ended_when_stop_returns():
    """The judge measures reference solutions' memory with tracemalloc in the grader's process right after a
    kernel's clean-up; tracemalloc counts every thread's allocations, so the watch's thread must be gone."""
    import time

    from grading.preprocessors import kernelmanager
    from shared.memory import measure_peak_memory

    def allocate():
        return [bytearray(64) for _ in range(8)]

    alone = measure_peak_memory(allocate).peak_bytes
    for pause in (0.0, 0.019, 0.021, 0.04):
        watch = kernelmanager.GrowthWatch(kernelmanager.MessageBudget(lambda: None))
        time.sleep(pause)
        watch.stop()
        assert not watch._thread.is_alive()
        assert measure_peak_memory(allocate).peak_bytes == alone


def test_a_measured_reference_is_computed_alone_whatever_threads_the_grader_runs():
    """tracemalloc counts every thread's allocations: a reference measured in the grader's process while one
    of its threads allocates measures that thread too; computed alone (a forked child) it does not."""
    import threading

    from grading import judge
    from shared.memory import measure_peak_memory

    def step():
        __import__("time").sleep(0.02)  # (the other thread runs meanwhile, as it would during a real step)
        return [bytearray(64) for _ in range(8)]

    def allocate():
        return measure_peak_memory(step).peak_bytes

    quiet = allocate()
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            [bytearray(4096) for _ in range(16)]

    thread = threading.Thread(target=busy, daemon=True)
    thread.start()
    try:
        beside = [allocate() for _ in range(5)]
        apart = [judge.alone(allocate, seconds=20) for _ in range(5)]
    finally:
        stop.set()
        thread.join()
    # (quiet is this process's measurement before the thread started: a test runner's process may have threads of
    # its own, so alone can be less, never more)
    assert len(set(apart)) == 1 and apart[0] <= quiet
    assert max(beside) > apart[0] + 4096  # the probe sees the thread when it measures in this process
    with pytest.raises(ZeroDivisionError):
        judge.alone(lambda: 1 / 0, seconds=20)
    with pytest.raises(RuntimeError, match="no whole answer"):
        judge.alone(__import__("time").sleep, 5, seconds=0.5)


def test_the_lessons_whose_reference_measures_memory_say_so():
    from grading.judge import lesson_spec
    assert lesson_spec("039").measured_reference
    assert not lesson_spec("040").measured_reference and not lesson_spec("036").measured_reference
