"""The kernel's side of grading: call the learner's function, send back plain data.

While a notebook is graded, the hidden region of each lesson's test cell is
two lines written by the build::

    from grading.harness import answer_hidden_cases
    answer_hidden_cases("003", globals())

This module decides nothing.  It reads the lesson's inputs from the file the
grader put into the sandbox (``$MCT_CASES_FILE``), calls the learner's function
on each of them in a forked child process, and displays one message of MIME
type :data:`grading.protocol.ANSWERS_MIME` with the results, the inputs as they
were after each call, and which results share memory with an input.  The judge, in nbgrader's own
process, compares them with the reference and gives the points.

What the course measures about *how* an answer was computed is measured here,
on objects the harness made, never taken from the learner's function: a lesson
about a collective runs on a :class:`shared.cluster.Cluster` the harness creates
and passes in (its ledger, read after the call, is the traffic); a measured case
runs under :class:`grading.meter.Meter`, which the code it measures cannot reset.

The child process is what makes one lesson's fate its own: a crash, an
endless loop, ``os._exit``, ``SystemExit``, a memory bomb or a flood of output
in the learner's function ends that child, the lesson is reported as such, and
the kernel goes on with the next cell.  The child's output is captured and
capped, and it runs under the lesson's time limit and a memory limit.
"""

from __future__ import annotations

import io
import json
import os
import resource
import select
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

import numpy as np

from . import wire
from .meter import Meter, TooMuchToRead, freeze_made_before
from .protocol import ANSWERS_MIME, CASES_FILE_ENV, MESSAGE_CUT, REVEAL_DIR_ENV

OUTPUT_CAP = 4000            # characters of the learner's printed output kept per lesson
CHILD_MEMORY = 3 * 2**30     # bytes of address space a lesson's child may add to the kernel's


class _CappedText(io.TextIOBase):
    """A stdout/stderr stand-in that keeps the first OUTPUT_CAP characters and counts the rest."""

    def __init__(self) -> None:
        self.kept: list[str] = []
        self.size = 0
        self.dropped = 0

    def writable(self) -> bool:
        return True

    def write(self, text: Any) -> int:
        text = str(text)
        room = OUTPUT_CAP - self.size
        self.kept.append(text[:max(room, 0)])
        self.size += min(len(text), max(room, 0))
        self.dropped += max(len(text) - max(room, 0), 0)
        return len(text)

    def text(self) -> str:
        tail = f"\n[... {self.dropped} more characters of output dropped]" if self.dropped else ""
        return "".join(self.kept) + tail


_read_cases: dict[tuple[str, int, int], dict[str, Any]] = {}  # (path, mtime, size) -> its lessons


def _load_lessons() -> dict[str, Any]:
    """The cases file's lessons by code (the graded part's), or nothing outside grading.

    Read once per kernel (the file is the same for every lesson of the notebook, and a part's can
    hold megabytes of inputs): each lesson's child inherits the parsed cases instead of parsing
    them again. A changed file (another path, time or size) is read again."""
    path = os.environ.get(CASES_FILE_ENV)
    if not path or not os.path.isfile(path):
        return {}
    status = os.stat(path)
    key = (path, status.st_mtime_ns, status.st_size)
    if key not in _read_cases:
        with open(path, encoding="utf-8") as handle:
            _read_cases.clear()
            _read_cases[key] = json.load(handle)["lessons"]
    return _read_cases[key]


def _load_lesson(code: str) -> dict[str, Any] | None:
    return _load_lessons().get(code)


def _aliases(result: Any, args: dict[str, Any]) -> list[str]:
    """Which arrays of the result share memory with an input."""
    from shared.cluster import arrays_held, first_shared
    found = []
    sources = [item for name, value in args.items() for item in arrays_held(value, f"`{name}`")]
    for where, array in arrays_held(result, "the result"):
        index = first_shared(array, [other for _, other in sources])
        if index is not None:
            found.append(f"{where} shares memory with {sources[index][0]}")
    return found


def _per_worker(result: Any) -> Any:
    """The per-worker values of a result: the result itself, or the first item of a returned tuple."""
    return result[0] if type(result) is tuple and result else result


def _held_received(cluster: Any, result: Any) -> list[bool]:
    """Per worker, whether its part of the result holds memory that it received on ``cluster``."""
    per_worker = _per_worker(result)
    if type(per_worker) not in (list, tuple):
        return []
    return [cluster.holds_received(rank, item) for rank, item in enumerate(per_worker)]


def _cluster_for(case: dict[str, Any]) -> tuple[str, Any] | None:
    """(argument name, a new Cluster) when the lesson runs on a cluster the grader makes."""
    spec = case.get("cluster")
    if not spec:
        return None
    from shared.cluster import Cluster
    return spec["arg"], Cluster(int(spec["workers"]))


def _where(error: BaseException, lesson_of: Mapping[str, str]) -> str:
    """Where the learner's function raised, as the learner knows their notebook: the lesson's cell, the
    line and its text; the course's helpers and NumPy by name only (``shared.where``). No path of the
    sandbox or of the course's modules reaches the verdict."""
    from shared.where import describe_error
    try:
        return "\n".join(describe_error(error, lesson_of))[:4000]
    except Exception:  # noqa: BLE001 (the case is answered all the same: its error and message are what count)
        return ""


def _answer_one(function: Callable[..., Any], case: dict[str, Any], index: int,
                earlier: list[tuple[str, Any]], workers_apart: bool = False,
                lesson_of: Mapping[str, str] | None = None, namespace: Any = None) -> dict[str, Any]:
    lesson_of = lesson_of or {}
    args = wire.from_plain(case["args"])
    on_cluster = _cluster_for(case)
    extra = {on_cluster[0]: on_cluster[1]} if on_cluster else {}
    meter = Meter() if case.get("measure") else None  # the lesson's technique is graded: its bytes
    if meter is not None and namespace is not None:
        try:
            freeze_made_before(namespace)  # the notebook's arrays made before the call: not the call's to write
        except TooMuchToRead as error:
            return {"kind": "raised", "error": "TooMuchToRead", "message": str(error)[:MESSAGE_CUT], "traceback": "",
                    "seconds": 0.0}
    started = time.perf_counter()
    try:
        if meter is None:
            result = function(*args.values(), **extra)
        else:
            with meter:
                result = function(*args.values(), **extra)
    except BaseException as error:  # SystemExit and KeyboardInterrupt too: they end this case only
        return {"kind": "raised", "error": type(error).__name__, "message": str(error)[:MESSAGE_CUT],
                "traceback": _where(error, lesson_of), "seconds": time.perf_counter() - started}
    seconds = time.perf_counter() - started
    from shared.cluster import arrays_shared_within, parts_held, parts_reused
    answer: dict[str, Any] = {"kind": "returned", "seconds": seconds,
                              "aliases": _aliases(result, args), "reused": parts_reused(result, earlier),
                              "parts_shared": arrays_shared_within(result)}
    if on_cluster:  # read off the cluster the harness made: what was really sent
        answer["traffic"] = on_cluster[1].ledger.summary()
        answer["unreceived"] = on_cluster[1].unreceived()
        if case["cluster"].get("results_received"):
            answer["held_received"] = _held_received(on_cluster[1], result)
    if workers_apart:  # the lesson's result holds one value per worker: do workers share arrays?
        from shared.cluster import arrays_shared_between_workers
        answer["workers_shared"] = arrays_shared_between_workers(
            _per_worker(result), "the result" if type(result) is not tuple else "the result[0]")
    if meter is not None:
        answer["peak_bytes"], answer["kept_bytes"] = meter.peak_bytes, meter.kept_bytes
        answer["trace_kept"] = meter.trace_kept
        answer["resident_peak_bytes"], answer["resident_kept_bytes"] = meter.resident_peak_bytes, meter.resident_kept_bytes
    try:
        answer["result"] = wire.to_plain(result, "the result")
    except wire.WireError as error:
        return {"kind": "unsendable", "message": str(error), "seconds": seconds}
    try:
        after = wire.to_plain(args, "the inputs")
    except wire.WireError as error:
        answer["args_after"] = None
        answer["args_note"] = f"the inputs after the call cannot be compared: {error}"
    else:
        # The inputs go back only when the call changed them: a part's largest cases hold megabytes
        # of inputs, and sending them unchanged was most of a notebook's traffic to the judge. (The
        # judge's verdict is no weaker: a kernel that lied could always send the inputs it was given.)
        if after == case["args"]:
            answer["args_unchanged"] = True
        else:
            answer["args_after"] = after
    # kept alive to the end of the lesson, so that a later result can be compared with them (and no id is reused)
    earlier.extend(parts_held(result, f"case {index + 1}'s result"))
    return answer


def _use_helper_versions(code: str, namespace: MutableMapping[str, Any], names: list[str]) -> None:
    """Isolation: earlier lessons' functions are the helper package's while this lesson is graded.

    In the sandbox the grader shows their source only while this lesson's cell runs
    (``$MCT_REVEAL_DIR/<code>.py``, see grading.redact); elsewhere they come from
    ``shared.lesson_blocks``.
    """
    if not names:
        return
    revealed = Path(os.environ.get(REVEAL_DIR_ENV, "/nonexistent")) / f"{code}.py"
    if revealed.is_file():
        from shared.where import BUILDING_BLOCKS_MODULE  # so a traceback names them as the course's helpers
        blocks: dict[str, Any] = {"__name__": BUILDING_BLOCKS_MODULE}
        exec(compile(revealed.read_text(), f"<building blocks of lesson {code}>", "exec"), blocks)
    else:
        from shared import lesson_blocks
        blocks = vars(lesson_blocks)
    for name in names:
        namespace[name] = blocks[name]


def _run_child(code: str, lesson: dict[str, Any], namespace: MutableMapping[str, Any], out_path: str) -> None:
    """In the forked child: answer every case, write the JSON answers to ``out_path``."""
    # The kernel's objects are the child's too (copy-on-write): the collector need not walk them
    # again at each measured case (gc.collect() walks every tracked object, and a kernel holds
    # hundreds of thousands), nor touch their pages. The child's own objects are collected as usual.
    from shared import memory
    memory.freeze_for_good()
    captured = _CappedText()
    sys.stdout = sys.stderr = captured
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    try:
        with open("/proc/self/statm") as statm:
            in_use = int(statm.read().split()[0]) * resource.getpagesize()
        wanted = in_use + CHILD_MEMORY
        if hard == resource.RLIM_INFINITY or wanted < hard:
            resource.setrlimit(resource.RLIMIT_AS, (wanted, hard))
    except (OSError, ValueError):
        pass
    from shared import answers
    answers.lock(code)
    _use_helper_versions(code, namespace, lesson.get("isolate", []))
    function = namespace[lesson["function"]]
    earlier: list[tuple[str, Any]] = []
    workers_apart = bool(lesson.get("workers_apart"))
    # which function is which lesson's, to name the learner's cells in a traceback ("lesson 035's cell")
    lesson_of = {str(other.get("function")): other_code for other_code, other in _load_lessons().items()}
    results = [_answer_one(function, case, i, earlier, workers_apart, lesson_of, namespace)
               for i, case in enumerate(lesson["cases"])]
    text = json.dumps({"lesson": code, "status": "answered", "answers": results,
                       "output": captured.text()}, allow_nan=False)
    with open(out_path, "w", encoding="utf-8") as handle:
        handle.write(text)


def _sleep_until_ended(pidfd: int | None, timeout: float) -> None:
    """Sleep until the child ends or ``timeout`` seconds pass: woken by the child's end itself where
    the kernel offers a descriptor for it (``pidfd``), else after at most 5 ms. (A lesson's
    child lives some 20 ms: polling every 5 ms lost 2.5 ms on average, forty lessons a student.)"""
    if pidfd is None:
        time.sleep(min(timeout, 0.005))
    else:
        select.select([pidfd], [], [], max(timeout, 0.0))


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # an older kernel, or a sandbox that refuses the call
        return None


def _wait(pid: int, deadline: float) -> tuple[str, int | None]:
    """Wait for the child until ``deadline``; kill it (and anything it started) after that."""
    pidfd = _pidfd(pid)
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if os.WIFSIGNALED(status):
                    return "killed", os.WTERMSIG(status)
                return "exited", os.WEXITSTATUS(status)
            left = deadline - time.monotonic()
            if left < 0:
                return "timeout", None
            _sleep_until_ended(pidfd, left)
    finally:
        if pidfd is not None:
            os.close(pidfd)
        for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            try:
                target()
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _import_what_the_child_uses() -> None:
    """Import, in the kernel, the modules each lesson's child uses: a child forked from a kernel that
    has them finds them imported; otherwise each child would import (and compile) them again."""
    import shared.answers  # noqa: F401
    import shared.cluster  # noqa: F401
    import shared.memory  # noqa: F401
    import shared.where  # noqa: F401


def collect_answers(code: str, namespace: MutableMapping[str, Any]) -> dict[str, Any]:
    """The learner's answers to lesson ``code``'s hidden cases, as plain data."""
    lesson = _load_lesson(code)
    if lesson is None:
        return {"lesson": code, "status": "no_cases",
                "message": "the hidden tests run only while a notebook is graded (`make grade`)"}
    function = namespace.get(lesson["function"])
    if function is None:
        return {"lesson": code, "status": "not_defined",
                "message": f"`{lesson['function']}` is not defined: run its Implementation cell "
                           f"(or restore it if it was deleted)"}
    if not callable(function):
        return {"lesson": code, "status": "not_defined",
                "message": f"`{lesson['function']}` is not a function"}
    _import_what_the_child_uses()
    fd, out_path = tempfile.mkstemp(prefix=f"mct-{code}-", suffix=".json")
    os.close(fd)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: whatever happens, it ends here
        try:
            os.setpgid(0, 0)
            _run_child(code, lesson, namespace, out_path)
            os._exit(0)
        except BaseException:
            os._exit(70)
    try:
        how, value = _wait(pid, time.monotonic() + float(lesson.get("time_limit", 20)))
        with open(out_path, encoding="utf-8") as handle:
            text = handle.read()
    finally:
        os.unlink(out_path)
    if how == "timeout":
        return {"lesson": code, "status": "timeout",
                "message": f"{lesson['function']} did not finish its hidden cases within "
                           f"{lesson.get('time_limit', 20):g} s (an endless loop, or far more work or memory "
                           f"than the lesson needs?)"}
    if how == "exited" and value == 0 and text:
        return json.loads(text)
    if how == "killed":
        what = {signal.SIGKILL: "killed (out of memory?)", signal.SIGSEGV: "a segmentation fault"}
        detail = what.get(value, f"signal {value}")
    elif value == 70:
        detail = "an error outside the function's calls (its result could not be collected)"
    else:
        detail = f"the process ended with exit status {value} (os._exit?)"
    return {"lesson": code, "status": "crashed",
            "message": f"{lesson['function']} ended the grading process: {detail}"}


class AnswersSent(Exception):
    """Ends a test cell once its answers are sent: while grading, the visible tests below do not
    run (the judge decides; a learner's function that ends the process or floods the output must
    not get a second chance to do so in the kernel itself)."""

    def _render_traceback_(self) -> list[str]:
        return ["(answers sent to the grader; the visible tests are not run while grading)"]


def answer_hidden_cases(code: str, namespace: MutableMapping[str, Any]) -> None:
    """Display the answers of lesson ``code`` for the judge (see the module docstring)."""
    payload = collect_answers(code, namespace)
    try:
        from IPython.display import display
    except ImportError:  # outside a kernel there is no judge to read it
        return
    display({ANSWERS_MIME: payload, "text/plain": f"[answers to lesson {code}'s hidden cases, sent for grading]"},
            raw=True)
    if payload.get("status") != "no_cases":
        raise AnswersSent()
