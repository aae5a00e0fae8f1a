"""What a lesson's technique is graded on stands on more than the rules for graded code.

The lessons whose memory or traffic is measured (014, 027, 029, 032, 034, 040) met these attacks
(issue 40): the meter's tracing stopped or reset around a shortcut, a collective's traffic record written
directly, a private field of the cluster written, the arrays a worker received written into, and the
built-ins reached through an allowed module.  Each is shut twice:

- by the rules: an attack written in a lesson's function is graded code that breaks them, so that cell is
  never run, the lesson gets no points and the notebook is listed; written beside the function, in the same
  cell, it is left out and never runs, as a scratch line (checked here on the notebook, as the judge reads
  it, beside the honest cell, which keeps them);
- at run time, for code the rules never saw: a measured case checks that the trace was whole (tracing
  stopped from inside loses the points, named), and what a worker received is read-only for good.
"""

from __future__ import annotations

import numpy as np
import pytest

from course import ROOT, make_submission, reference_code, with_import_inside
from grading import rules
from shared.policy import check_source
from grading.judge import grade_in_process
from shared.cluster import Cluster
from shared.lessons import lesson

MEASURED_LESSONS = ("014", "027", "029", "032", "034", "040")

#: Each attack as one line (or two) that a learner's cell would hold.
ATTACKS = {
    "stops the tracer through the helper": "from shared import memory\nmemory.tracemalloc.stop()",
    "resets the tracer": "import tracemalloc\ntracemalloc.reset_peak()",
    "writes a traffic record": "Cluster(2).ledger._record_round([(0, 1, 8)])",
    "writes a private field": "Cluster(2)._mailboxes.clear()",
    "makes a received array writeable": "Cluster(2).receive(1, 0).setflags(write=True)",
    "reaches the builtins through an allowed module": "import dataclasses\ndataclasses.builtins.setattr(np, 'x', 1)",
}


def _findings(code: str, extra: str | None, inside: bool = True):
    """The judge's reading of a notebook of reference answers whose lesson ``code`` cell also holds ``extra``:
    first in its function's body (``inside``), or below the function."""
    found = lesson(code)
    source = reference_code(found.part.slug, found.function)
    if extra:
        source = with_import_inside(source, found.function, extra)[0] if inside else f"{source}\n\n{extra}\n"
    notebook = make_submission(found.part.slug, {found.function: source}, default="reference")
    return rules.check_notebook(notebook.cells, found.part.slug)


@pytest.mark.parametrize("code", MEASURED_LESSONS)
def test_the_honest_cell_keeps_the_rules(code):
    assert _findings(code, None).cells == []


@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.parametrize("code", MEASURED_LESSONS)
def test_an_attack_on_what_is_measured_costs_its_lesson(code, attack):
    findings = _findings(code, ATTACKS[attack])
    costs = findings.of_lesson(code)
    assert costs, f"{attack} in lesson {code}'s function went unnoticed"
    assert "breaks the course's rules for graded code" in costs[0].lesson_message(lesson(code).function)
    index = costs[0].index  # the function is not run: nor is its cell, or (the cell has more) the function's lines
    assert findings.skipped == {index} or lesson(code).function in findings.trimmed[index].binds


@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.parametrize("code", MEASURED_LESSONS)
def test_an_attack_beside_the_function_never_runs(code, attack):
    """The attack's lines are left out of the cell (its function, which keeps the rules, runs): what the
    grader runs holds none of them."""
    findings = _findings(code, ATTACKS[attack], inside=False)
    assert not findings.of_lesson(code)
    (trimmed,) = findings.trimmed.values()
    assert ATTACKS[attack].splitlines()[-1] not in trimmed.source.splitlines(), trimmed.source  # what does harm
    assert check_source(trimmed.source, course=rules.course_cells(lesson(code).part.slug).imports) == []


def _tracing_stopped_around(function):
    """``function``, but with Python's memory tracing stopped while it runs (by the C module itself, which graded
    code cannot reach: this is the run-time guard's test, for code the rules never saw)."""
    import _tracemalloc

    def untraced(*args, **kwargs):
        _tracemalloc.stop()
        try:
            return function(*args, **kwargs)
        finally:
            _tracemalloc.start()
    return untraced


@pytest.mark.parametrize("code", ("014", "029", "032", "040"))
def test_tracing_stopped_from_inside_a_measured_call_loses_the_points(code):
    found = lesson(code)
    namespace: dict = {}
    path = ROOT / "solutions" / f"{found.part.slug}.py"
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    assert grade_in_process(code, dict(namespace)).passed
    namespace[found.function] = _tracing_stopped_around(namespace[found.function])
    verdict = grade_in_process(code, namespace)
    assert not verdict.passed and "memory trace was stopped or cleared" in verdict.message, verdict.message


def test_what_a_worker_received_is_read_only_for_good():
    cluster = Cluster(2)
    sent = np.arange(6.0).reshape(2, 3)
    with cluster.round():
        cluster.send(0, 1, sent)
    received = cluster.receive(1, 0)
    assert np.array_equal(received, sent) and not received.flags.writeable
    with pytest.raises(ValueError):
        received[0, 0] = 1.0
    with pytest.raises(ValueError):
        received.setflags(write=True)  # its memory is an immutable bytes: no flag makes it writeable
    assert not np.ndarray(received.shape, received.dtype, buffer=received).flags.writeable


def test_lesson_027_cannot_send_zeros_and_write_the_mean_into_what_it_received():
    """The attack issue 40 found within the rules: the right traffic, the mean computed from the inputs."""
    source = '''
def all_reduce_mean(worker_arrays, cluster=None):
    n = len(worker_arrays)
    with cluster.round():
        for rank in range(1, n):
            cluster.send(rank, 0, worker_arrays[rank])
    for rank in range(1, n):
        cluster.receive(0, rank)
    mean = sum(worker_arrays) / n
    with cluster.round():
        for rank in range(1, n):
            cluster.send(0, rank, np.zeros_like(mean))
    results = [mean]
    for rank in range(1, n):
        received = cluster.receive(rank, 0)
        received[...] = mean
        results.append(received)
    return results, cluster.ledger.summary()
'''
    namespace = {"np": np}
    exec(source, namespace)
    verdict = grade_in_process("027", namespace)
    assert not verdict.passed and "read-only" in verdict.message and "human look" in verdict.message, verdict.message


# What a notebook can hold before a measured call, each way an array can be kept (tests/test_measurement_guards.py
# runs it as a notebook's kernel would: the names are the notebook's globals, its module __main__).
MADE_BEFORE = '''
import functools, itertools
POOL = np.ones(1000)
HELD = {"pool": np.ones(1001)}
LISTED = [np.ones(1002)]
VIEWED = np.ones(1003)[::1]
OBJECTS = np.empty(1, dtype=object)
OBJECTS[0] = np.ones(1004)
def with_default(x, pool=np.ones(1005)):
    return pool
def factory():
    pool = np.ones(1006)
    def inner():
        return pool
    return inner
closure = factory()
@functools.cache
def cached(n):
    return np.ones(n)
cached(1007)
def generate():
    pool = np.ones(1008)
    while True:
        yield pool
generator = generate()
next(generator)
repeated = itertools.repeat(np.ones(1009))
class Holder:
    kept = np.ones(1010)
    def __init__(self):
        self.pool = np.ones(1011)
holder = Holder()
partial = functools.partial(with_default, pool=np.ones(1012))
'''


def _kept_arrays(namespace: dict) -> list[np.ndarray]:
    """The arrays MADE_BEFORE keeps, each from where it is kept (not by searching the process: another test's
    array of the same size would be counted)."""
    generator = namespace["generator"]
    return [namespace["POOL"], namespace["HELD"]["pool"], namespace["LISTED"][0], namespace["VIEWED"].base,
            namespace["OBJECTS"][0], namespace["with_default"].__defaults__[0],
            namespace["closure"].__closure__[0].cell_contents, namespace["cached"](1007),
            generator.gi_frame.f_locals["pool"], next(namespace["repeated"]), namespace["Holder"].kept,
            namespace["holder"].pool, namespace["partial"].keywords["pool"]]


def _arrays_left_writeable(namespace: dict) -> list[int]:
    """In a forked child (the harness's place: nothing of this process is changed), freeze what ``namespace``
    reaches, then the sizes of the arrays it keeps (1000 to 1013) still writeable; also checks that a new array is."""
    import json
    import os

    from grading.meter import freeze_made_before

    kept = _kept_arrays(namespace)
    assert sorted(array.size for array in kept) == list(range(1000, 1013)), "the test's own list is out of date"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            kept.append(np.ones(1013))
            np.typecodes["kept"] = kept[-1]  # (an admitted module's public dict: graded code may set an item)
            freeze_made_before(namespace)
            left = sorted(array.size for array in kept if array.flags.writeable)
            os.write(write, json.dumps({"left": left, "new": np.ones(3).flags.writeable}).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as handle:
        found = json.loads(handle.read())
    os.waitpid(pid, 0)
    assert found["new"], "an array made after the freeze must stay writeable"
    return found["left"]


def test_a_notebook_that_holds_more_than_the_grader_reads_is_not_measured():
    """Fail closed: past FOLLOW_AT_MOST objects (or an object array past its limit) anything unread could hide an
    array, so freeze_made_before raises and the measured case is answered with why, never measured unseen."""
    import os

    from grading import meter

    namespace = {"__name__": "__main__", "filler": [[] for _ in range(meter.FOLLOW_AT_MOST + 1)]}
    pid = os.fork()
    if pid == 0:
        try:
            meter.freeze_made_before(namespace)
            os._exit(1)
        except meter.TooMuchToRead:
            os._exit(0)
        finally:
            os._exit(2)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def test_every_array_a_notebook_made_before_a_measured_call_is_read_only_in_it():
    """A global, a dict's or a list's item, a view's base, an object array's element, a default argument, a
    closure's, a cache's, a suspended generator's, an iterator's, a class's and an instance's attribute, a
    partial's argument, an item of an admitted module's public dict: made read-only in the grading child, so a measured call cannot work in it unseen."""
    namespace = {"__name__": "__main__", "np": np}
    exec(MADE_BEFORE, namespace)
    assert _arrays_left_writeable(namespace) == []
    assert namespace["POOL"].flags.writeable, "the notebook's own arrays are untouched (only the child's are frozen)"


WORKSPACE_014 = '''
POOL = np.ones(2**20)  # made at the top level of the cell, before any measurement


def grad_accumulation_step(params, X, Y, num_micro_batches, learning_rate):
    """The reference's numbers, but its whole forward pass written into views of POOL."""
    if num_micro_batches < 1 or len(X) < num_micro_batches or len(X) != len(Y):
        raise ValueError("bad micro-batches")
    first = POOL[:X.size].reshape(X.shape)
    np.multiply(X, 1.0, out=first)  # work in memory made before the call: no allocation the meter sees
    return REFERENCE(params, X, Y, num_micro_batches, learning_rate)
'''


def test_work_in_an_array_made_before_a_measured_call_loses_the_points_and_says_why():
    """A red team's attack: 014's whole batch at once in a 64 MiB array made at the top level of its cell got 5/5
    (neither tracemalloc nor the resident peak sees memory made before the call).  It now raises in the measured
    case, and the verdict says why; the reference alone still passes."""
    path = ROOT / "solutions" / "02_gradient_accumulation.py"
    reference: dict = {"__name__": "__main__"}
    exec(compile(path.read_text(), str(path), "exec"), reference)
    namespace = {"__name__": "__main__", "np": np, "REFERENCE": reference["grad_accumulation_step"]}
    exec(WORKSPACE_014, namespace)
    verdict = grade_in_process("014", namespace)
    assert not verdict.passed and "every array your notebook made before the call is read-only" in verdict.message, \
        verdict.message
    assert grade_in_process("014", reference).passed


def test_the_freeze_reads_every_module_graded_code_may_use():
    """The grading kernel has no shared.allowlist, so the meter names the modules itself: the same ones."""
    from grading import meter
    from shared.allowlist import ALLOWED_MODULES

    assert set(meter._REACHABLE_MODULES) == {name for name in ALLOWED_MODULES
                                             if name != "__future__" and not name.startswith("shared.")}
