"""The judge inside nbgrader: preprocessors around nbgrader's ``Execute``.

``PrepareCases`` (before execution) draws the cases of every lesson of the
notebook's part and writes their inputs where the grading kernel will find
them.  ``CheckRules`` (before execution) reads every cell the learner wrote or
changed against the rules for graded code (:mod:`grading.rules`); a cell that
breaks them is not run.  ``SandboxedExecute`` runs the notebook and takes each
lesson's answers as they arrive, from the message itself: only a plain
``display_data`` message of the lesson's own test cell, while that cell runs,
counts (an update of an earlier display, a message from another cell or a second
one are refused).  ``JudgeLessons`` (after execution) judges the answers
(:mod:`grading.judge`), applies the rules' verdicts, and replaces each test cell's
outputs with its verdict; it caps every other cell's output, so a flood of
printing cannot make a huge page.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import math
import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any

import zmq
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.connect import channel_socket_types
from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import DottedObjectName, Integer

from shared.lessons import lesson as find_lesson, lesson_of_grade_id, lessons_of

from . import cgroups, feedback_text, judge, kernel_tree, redact, rules, sandbox
from .protocol import (ANSWERS_MIME, CASES_FILE_HOST_ENV, CELL_OUTPUT_BYTES_ENV, CGROUP_NAME_ENV, INSIDE_IP,
                       KERNEL_TREE_HOST_ENV, NOTEBOOK_OUTPUT_BYTES_ENV, PRIVATE_DIR_ENV, REVEAL_DIR_HOST_ENV,
                       RUN_BROKEN_CELLS_ENV, RUN_DEMOS_ENV, Reason)

RUN_SEED = judge.run_seed()  # one per nbgrader process (tools/instructor.py gives all of a run the same)
# For the sandbox's own tests only: cells that break the rules run all the same (they still cost their
# lessons or withhold the grade), so that what the sandbox must stop reaches it.
RUN_BROKEN_CELLS = os.environ.get(RUN_BROKEN_CELLS_ENV) == "1"
# The course's demonstrations (cells tagged demo in the masters) grade nothing: they are not run while grading
# unless MCT_RUN_DEMOS=1 (tests/test_nbgrader_loop.py grades the solved notebooks both ways).
RUN_DEMOS = os.environ.get(RUN_DEMOS_ENV) == "1"

# Output a notebook may send, counted in this process as it arrives (what is past a budget is dropped at
# once, never held): per cell, per notebook, and per message (ZeroMQ refuses a larger one unread).
CELL_OUTPUT_BYTES = int(os.environ.get(CELL_OUTPUT_BYTES_ENV, 2 * 2**20))
NOTEBOOK_OUTPUT_BYTES = int(os.environ.get(NOTEBOOK_OUTPUT_BYTES_ENV, 8 * 2**20))
MAX_MESSAGE_BYTES = 32 * 2**20  # above any lesson's answers (the largest, lesson 040's, are about 12 MB)
QUEUED_MESSAGES = 32  # output messages waiting to be read: past that a flood is dropped by ZeroMQ, unread
OUTPUT_MESSAGES = ("stream", "display_data", "execute_result", "error", "update_display_data")
KERNEL_NOT_STARTED = ("the grading sandbox did not start (bubblewrap failed: its message is in this log): the "
                      "notebook was not graded; this is the grading machine's set-up, not the student's work")

_drawn: dict[str, dict[str, list]] = {}  # part slug -> this notebook's cases (judge side only)


def _slug(resources: dict[str, Any]) -> str:
    return str(resources.get("nbgrader", {}).get("assignment", ""))


class PrepareCases(NbGraderPreprocessor):
    """Draw this run's cases and put what the sandboxed kernel may read where it can read it: the
    cases' inputs, and the kernel's own tree of modules (:mod:`grading.kernel_tree`).

    Both depend only on the part and the run's seed, so they are made once per part for every
    notebook this nbgrader process grades (bound read-only into each sandbox), and removed at exit."""

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]):
        slug = _slug(resources)
        drawn = judge.draw_part(slug, RUN_SEED)
        _drawn[slug] = drawn
        folder = _prepared(slug, drawn)
        os.environ[CASES_FILE_HOST_ENV] = str(folder / "cases.json")
        os.environ[KERNEL_TREE_HOST_ENV] = str(folder / "tree")
        os.environ[REVEAL_DIR_HOST_ENV] = str(folder / "reveal")
        self.log.info("grading %s with run seed %d", slug, RUN_SEED)
        return nb, resources


_prepared_folders: dict[str, Path] = {}  # part slug -> its cases, tree and reveal folder (this process)


def _prepared(slug: str, drawn: dict[str, list]) -> Path:
    """The folder of part ``slug``'s kernel input and tree, made on first use."""
    if slug in _prepared_folders:
        return _prepared_folders[slug]
    folder = Path(tempfile.mkdtemp(prefix="mct-cases-"))
    atexit.register(shutil.rmtree, folder, True)
    path = folder / "cases.json"
    path.write_text(json.dumps(judge.kernel_input(slug, drawn), allow_nan=False))
    kernel_tree.build(slug, folder / "tree")
    reveal = folder / "reveal"
    reveal.mkdir()
    for item in (folder, reveal):
        item.chmod(0o755)
    path.chmod(0o644)
    _prepared_folders[slug] = folder
    return folder


class CheckRules(NbGraderPreprocessor):
    """Read every cell the learner wrote or changed against the rules for graded code, before it runs."""

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]):
        findings = rules.check_notebook(nb.cells, _slug(resources))
        resources.setdefault("mct", {})["rules"] = findings
        for found in findings.cells:
            self.log.warning("%s breaks the rules for graded code: %s", found.where(),
                             "; ".join(str(b) for b in found.breaks[:3]))
        return nb, resources


KERNEL_DIED = ("the grading kernel died here (os._exit, a crash, or one of the sandbox's limits on memory, "
               "processes or time): the cells below did not run and their lessons get no points; "
               "this notebook needs a human look")


class SandboxedExecute(Execute):
    """nbgrader's Execute, but a kernel that dies costs only the lessons after it.

    nbgrader gives up a whole notebook when its kernel dies; here the cells already run keep
    their answers (the judge grades them), the cell where it died says so, and the cells after
    it are marked as not run.
    """

    _mct_notebook_bytes = _mct_cell_bytes = 0  # output counted so far (see _within_output_budget)
    _mct_cut = False

    def preprocess(self, nb, resources=None, km=None):
        self._died_at = None
        self._mct_notebook_bytes = 0  # (the cell's count starts again in preprocess_cell)
        self._mct = (resources if resources is not None else {}).setdefault("mct", {})
        self._mct.update(answers={}, refused=[])
        return super().preprocess(nb, resources, km)

    def preprocess_cell(self, cell, resources, index):
        self._mct_cell_bytes, self._mct_cut = 0, False
        if cell.cell_type == "code" and not RUN_DEMOS and rules.course_cells(_slug(resources)).is_demo(cell.source):
            cell.outputs = []  # a demonstration of the course's: nothing graded depends on it (tools/build.py)
            return cell, resources
        findings = self._mct.get("rules")
        if findings is not None and index in findings.skipped and not RUN_BROKEN_CELLS:
            found = next(f for f in findings.cells if f.index == index)
            text = f"[not run: {found.message()}] (this notebook needs a human look)"
            cell.outputs = [NotebookNode(output_type="error", ename="RulesBroken", evalue=text, traceback=[text])]
            return cell, resources
        revealed = self._reveal_building_blocks(cell)
        try:
            return self._run_cell(cell, resources, index)
        finally:
            if revealed is not None:
                revealed.unlink(missing_ok=True)

    def process_message(self, msg, cell, cell_index):
        """Every message of the running cell: answers are taken out here and never reach the notebook."""
        content = msg.get("content") or {}
        data = content.get("data")
        if isinstance(data, dict) and ANSWERS_MIME in data:
            self._take_answers(msg, cell, cell_index)
            rest = {mime: value for mime, value in data.items() if mime != ANSWERS_MIME}
            if not rest:
                return None
            msg = {**msg, "content": {**content, "data": rest}}
        if not self._within_output_budget(msg, cell):
            return None
        return super().process_message(msg, cell, cell_index)

    def _within_output_budget(self, msg, cell) -> bool:
        """Count an output message's bytes as it arrives; past the cell's or the notebook's budget, drop it
        (and say so once in the cell): a flood is never held in the grader's memory."""
        if msg.get("msg_type") not in OUTPUT_MESSAGES:
            return True
        content = msg.get("content") or {}
        size = (len(str(content.get("text", ""))) if msg["msg_type"] == "stream"
                else len(json.dumps(content.get("data", content), default=str)))
        self._mct_cell_bytes += size
        self._mct_notebook_bytes += size
        if self._mct_cell_bytes <= CELL_OUTPUT_BYTES and self._mct_notebook_bytes <= NOTEBOOK_OUTPUT_BYTES:
            return True
        if not self._mct_cut:
            self._mct_cut = True
            cell.outputs.append(NotebookNode(output_type="stream", name="stdout", text=(
                f"[output cut by the grader: more than {CELL_OUTPUT_BYTES:,} bytes in this cell or "
                f"{NOTEBOOK_OUTPUT_BYTES:,} in the notebook]\n")))
        return False

    def _take_answers(self, msg, cell, cell_index) -> None:
        """Keep one answers message of a lesson's own test cell; refuse any other (and say why)."""
        meta = cell.metadata.get("nbgrader", {})
        lesson = lesson_of_grade_id(str(meta.get("grade_id", "")))
        own_cell = bool(meta.get("grade")) and lesson is not None and meta.get("grade_id") == lesson.grade_id
        content = msg.get("content") or {}
        payload = json.loads(json.dumps(content["data"][ANSWERS_MIME]))
        said = payload.get("lesson") if isinstance(payload, dict) else None
        transient = content.get("transient") or {}
        why = None
        if msg.get("msg_type") != "display_data" or transient.get("display_id"):
            why = f"answers came as {msg.get('msg_type')!r}" + (" with a display id" if transient.get("display_id")
                                                                else "") + " (an update or a result, not a new display)"
        elif not own_cell:
            why = f"answers to lesson {said} came from a cell that is not its test cell"
        elif said != lesson.code:
            why = f"answers to lesson {said} came from lesson {lesson.code}'s test cell"
        elif cell_index in self._mct["answers"]:
            why = f"lesson {lesson.code}'s test cell sent more than one set of answers"
        if why is None:
            self._mct["answers"][cell_index] = payload
        else:
            self._mct["refused"].append((cell_index, str(said), why))
            self.log.warning("refused answers in cell %d: %s", cell_index, why)

    def _reveal_building_blocks(self, cell) -> Path | None:
        """Before a composite lesson's test cell: the helper's versions of the earlier lessons'
        functions it builds on, for this cell only (see grading.redact)."""
        folder = os.environ.get(REVEAL_DIR_HOST_ENV)
        lesson = lesson_of_grade_id(str(cell.metadata.get("nbgrader", {}).get("grade_id", "")))
        if not folder or lesson is None or cell.metadata["nbgrader"]["grade_id"] != lesson.grade_id:
            return None
        names = judge.lesson_spec(lesson.code).isolate
        if not names:
            return None
        path = Path(folder) / f"{lesson.code}.py"
        path.write_text(redact.revealed_blocks(names))
        path.chmod(0o644)
        return path

    def _get_timeout(self, cell):
        """A lesson's test cell answers its hidden cases first, under the lesson's own time limit (its spec's
        ``time_limit``, up to 60 s): the cell gets that limit on top of the per-cell one, so that a slow answer
        hears its lesson's limit from the harness instead of being cut off by the cell's."""
        timeout = super()._get_timeout(cell)
        grade_id = ((cell or {}).get("metadata", {}).get("nbgrader") or {}).get("grade_id", "")
        lesson = lesson_of_grade_id(grade_id)
        if timeout is None or lesson is None or grade_id != lesson.grade_id:
            return timeout
        return timeout + math.ceil(judge.lesson_spec(lesson.code).time_limit)

    def _run_cell(self, cell, resources, index):
        if self._died_at is not None:
            if cell.cell_type == "code":
                cell.outputs = [NotebookNode(output_type="stream", name="stdout",
                                             text=f"[not run: the kernel died at cell {self._died_at}]\n")]
            return cell, resources
        try:
            return super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self._died_at = index
            self.log.warning("the kernel died at cell %d", index)
            cell.outputs = list(cell.get("outputs", [])) + [NotebookNode(
                output_type="error", ename="KernelDied", evalue=KERNEL_DIED, traceback=[KERNEL_DIED])]
            return cell, resources


class SandboxKernelClient(AsyncKernelClient):
    """The grader's side of a kernel's sockets: no message larger than MAX_MESSAGE_BYTES is ever read.

    ZeroMQ checks a message's announced size before it reads it (``MAXMSGSIZE``) and drops a
    connection that sends a larger one (the socket connects again at once): a notebook that
    displays a gigabyte in one message never makes the grader hold it.  And no more than
    QUEUED_MESSAGES output messages wait to be read (the kernel's side drops the rest): a flood
    of many messages is not queued in the grader's memory either."""

    def _create_connected_socket(self, channel: str, identity: bytes | None = None):
        socket = self.context.socket(channel_socket_types[channel])
        socket.linger = 1000
        socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        if channel == "iopub":
            socket.setsockopt(zmq.RCVHWM, QUEUED_MESSAGES)
        if identity:
            socket.identity = identity
        socket.connect(self._make_url(channel))
        return socket


class SandboxKernelManager(AsyncKernelManager):
    """A kernel in the sandbox (:mod:`grading.sandbox`), and everything of it gone after it.

    Its sockets live in the sandbox's own ``/tmp`` (no host folder is writable by the kernel): the
    connection file names them as the kernel sees them, and once the sandbox runs, this side reaches
    them through ``/proc/<pid>/root``.  The connection file sits in a folder of the grader's own that
    the kernel never sees, and nothing the kernel made is ever followed, changed or removed from this
    side.  The kernel's control group (:mod:`grading.cgroups`) is emptied and removed with it.
    Without the sandbox (``MCT_SANDBOX=off``) the sockets are in that private folder."""

    client_class = DottedObjectName("grading.preprocessors.SandboxKernelClient")

    async def _async_pre_start_kernel(self, **kwargs):
        base = Path(os.environ[PRIVATE_DIR_ENV]) / "runtime"
        base.mkdir(parents=True, exist_ok=True)
        self._mct_folder = Path(tempfile.mkdtemp(prefix="kernel-", dir=base))
        self._mct_sandboxed = sandbox.sandbox_wanted()
        self._mct_cgroup = f"{cgroups.PREFIX}{secrets.token_hex(6)}"
        self.connection_file = str(self._mct_folder / "kernel.json")
        self.ip = INSIDE_IP if self._mct_sandboxed else str(self._mct_folder / "kernel")
        return await super()._async_pre_start_kernel(**kwargs)

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        kw["env"] = {**(kw.get("env") or os.environ), CGROUP_NAME_ENV: self._mct_cgroup}
        await super()._async_launch_kernel(kernel_cmd, **kw)
        if self._mct_sandboxed:
            pid = await asyncio.get_running_loop().run_in_executor(
                None, sandbox.sandbox_pid, self.provisioner.process.pid)
            if pid is None:
                raise RuntimeError(KERNEL_NOT_STARTED)
            self.ip = f"/proc/{pid}/root{INSIDE_IP}"  # the kernel's sockets, from this side

    def cleanup_ipc_files(self) -> None:
        """A sandboxed kernel's sockets vanish with its /tmp: nothing to remove (and a path through /proc
        of a pid that may be another process's by now is never touched)."""
        if not getattr(self, "_mct_sandboxed", True):
            super().cleanup_ipc_files()

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if restart:
            return
        cgroups.remove(getattr(self, "_mct_cgroup", ""))
        folder = getattr(self, "_mct_folder", None)
        if folder is not None:  # the grader's own folder: the connection file (and unsandboxed, the sockets)
            shutil.rmtree(folder, ignore_errors=True)


def _answers_in(cell: NotebookNode) -> tuple[list[dict[str, Any]], list[NotebookNode]]:
    """The answer messages of a cell, and its other outputs."""
    found, others = [], []
    for output in cell.get("outputs", []):
        data = output.get("data", {}) if output.get("output_type") in ("display_data", "execute_result") else {}
        if ANSWERS_MIME in data:  # plain JSON again (nbformat hands out its own dict subclass)
            found.append(json.loads(json.dumps(data[ANSWERS_MIME])))
        else:
            others.append(output)
    return found, others


def _cap(outputs: list[NotebookNode], limit: int) -> list[NotebookNode]:
    """Keep outputs until ``limit`` characters are used; say how much was cut."""
    kept, used = [], 0
    for output in outputs:
        size = len(json.dumps(output))
        if used + size > limit:
            kept.append(NotebookNode(output_type="stream", name="stdout",
                                     text=f"[output cut by the grader: more than {limit} characters]\n"))
            break
        kept.append(output)
        used += size
    return kept


def verdict_output(verdict: judge.Verdict) -> NotebookNode:
    lesson = find_lesson(verdict.code)
    if verdict.passed:
        return NotebookNode(output_type="stream", name="stdout",
                            text=f"✓ Lesson {lesson.code} · {lesson.title}: graded {lesson.points}/"
                                 f"{lesson.points} ({verdict.message})\n")
    return NotebookNode(output_type="error", ename="GradedFailure", evalue=verdict.message,
                        traceback=[f"Lesson {lesson.code} · {lesson.title}: 0/{lesson.points}",
                                   f"GradedFailure: {verdict.message}"])


class JudgeLessons(NbGraderPreprocessor):
    """Decide every lesson's test cell on this side; nothing the notebook output counts."""

    max_output_chars = Integer(20000, help="output characters kept per cell").tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]):
        slug = _slug(resources)
        drawn = _drawn.pop(slug)
        mct = resources.setdefault("mct", {})
        answers, refused = mct.get("answers", {}), mct.get("refused", [])
        findings = mct.get("rules") or rules.Findings()
        verdicts, cells = [], {}
        last_code = ""
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            _, others = _answers_in(cell)  # nothing of the kind can be left; dropped all the same
            meta = cell.metadata.get("nbgrader", {})
            lesson = lesson_of_grade_id(str(meta.get("grade_id", "")))
            if meta.get("grade") and lesson is not None and meta.get("grade_id") == lesson.grade_id:
                verdicts.append(self._judge(lesson.code, index, last_code, answers, refused, drawn))
                cells[lesson.code] = cell
                last_code = max(last_code, lesson.code)
            else:
                cell.outputs = _cap(others, self.max_output_chars)
                cell.outputs += [_refusal_output(why) for where, _, why in refused if where == index]
        verdicts = [_apply_rules(verdict, findings) for verdict in verdicts]
        for verdict in verdicts:
            cells[verdict.code].outputs = [verdict_output(verdict)]
        mct["verdicts"] = verdicts
        return nb, resources

    @staticmethod
    def _judge(code: str, index: int, last_code: str, answers: dict, refused: list, drawn: dict) -> judge.Verdict:
        mine = [why for where, said, why in refused if where == index]
        if code < last_code:  # a moved cell could run after a later lesson showed its building blocks
            return judge.Verdict(code, False, "this test cell was moved below a later lesson's; no points "
                                              "(this notebook needs a human look)")
        if mine:
            return judge.Verdict(code, False, f"answers refused: {mine[0]}; no points (this notebook needs a human "
                                              f"look)")
        return judge.judge_lesson(code, drawn.get(code, []), answers.get(index))


def _refusal_output(why: str) -> NotebookNode:
    text = f"answers refused: {why} (this notebook needs a human look)"
    return NotebookNode(output_type="error", ename="AnswersRefused", evalue=text, traceback=[text])


def _apply_rules(verdict: judge.Verdict, findings: rules.Findings) -> judge.Verdict:
    """A lesson whose region breaks the rules gets no points; a break outside every lesson withholds all."""
    if findings.outside:
        found = findings.outside[0]
        return judge.Verdict(verdict.code, False, f"grade withheld: {found.message()}; that cell, outside every "
                                                  f"lesson, was not run (this notebook needs a human look)",
                             Reason.RULES)
    mine = findings.of_lesson(verdict.code)
    if mine:
        return judge.Verdict(verdict.code, False, f"{mine[0].message()}; that cell was not run, and lesson "
                                                  f"{verdict.code} gets no points (listed for a human look)",
                             Reason.RULES)
    return verdict


PLAIN_TAG = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")


def _whole_number(value: Any) -> int | None:
    """A size as a whole number of pixels, or None (a string of digits counts; nothing else)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and re.fullmatch(r"\d{1,5}", value.strip()):
        value = int(value)
    return value if isinstance(value, int) and 0 < value < 100_000 else None


def image_sizes(metadata: Any) -> NotebookNode:
    """Of an output's metadata, only the width and height of its images, as whole numbers."""
    kept = NotebookNode()
    if not isinstance(metadata, dict):
        return kept
    for key, value in metadata.items():
        if key in ("width", "height"):
            size = _whole_number(value)
            if size is not None:
                kept[key] = size
        elif isinstance(key, str) and key.startswith("image/") and isinstance(value, dict):
            sizes = {k: _whole_number(value.get(k)) for k in ("width", "height")}
            sizes = {k: v for k, v in sizes.items() if v is not None}
            if sizes:
                kept[key] = NotebookNode(sizes)
    return kept


ACTIVE_MIME = ("text/html", "application/javascript", "image/svg+xml", "text/markdown", "text/latex")


class SanitizeFeedback(NbGraderPreprocessor):
    """Nothing from a notebook runs in the browser of whoever opens its feedback page.

    Raw HTML in markdown cells is shown as text (``<`` escaped), and so are links and images
    (``](``, ``]:`` and ``://`` escaped: a link target, however encoded, is never a live URL), and
    outputs keep only their plain-text and image forms (HTML, JavaScript, SVG and markdown
    outputs are dropped where a plain-text form exists, else replaced by a note).  No value
    from the notebook lands in an HTML attribute unchecked: an output's metadata keeps only an
    image's width and height, as whole numbers (nbconvert writes them unquoted), and a cell's
    tags (written into its class) only plain words.
    """

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]):
        for cell in nb.cells:
            tags = cell.get("metadata", {}).get("tags")
            if tags is not None:
                cell.metadata["tags"] = [t for t in tags if isinstance(t, str) and PLAIN_TAG.match(t)] \
                    if isinstance(tags, list) else []
            if cell.cell_type in ("markdown", "raw"):
                text = cell.source.replace("<", "&lt;").replace("](", "]&#40;").replace("]:", "]&#58;")
                text = text.replace("://", ":&#47;&#47;")  # a bare URL is not turned into a link either
                cell.source = re.sub(r"(?i)javascript:", "javascript&#58;", text)
                cell.pop("attachments", None)
            for output in cell.get("outputs", []):
                data = output.get("data")
                if not data:
                    continue
                for mime in [m for m in data if m in ACTIVE_MIME or "javascript" in m or "+json" in m]:
                    del data[mime]
                if not data:
                    data["text/plain"] = "[rich output not shown in feedback]"
                output["metadata"] = image_sizes(output.get("metadata"))
        return nb, resources


class LearnerFeedback(NbGraderPreprocessor):
    """The feedback page in the learner's words, with the gradebook's scores (after SanitizeFeedback).

    The autograded notebook keeps the grader's notes as the instructor's tools read them; here, for the page
    only (grading/feedback_text.py): every note in plain words, each lesson's verdict with the score the
    gradebook holds (one the instructor set by hand included), and the progress panel drawn from those
    scores.  It runs after SanitizeFeedback, which would drop the panel's HTML: that HTML is the grader's
    own, made from the lesson table and numbers, never from the notebook.
    """

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]):
        slug = _slug(resources)
        where = self._cell_namer(nb, slug)
        scores = {}
        for cell in nb.cells:
            lesson = feedback_text.lesson_of_test_cell(cell)
            if lesson is not None:
                cell.outputs = feedback_text.verdict_outputs(cell, lesson)
                scores[lesson.code] = (cell.metadata.nbgrader.get("score"), cell.metadata.nbgrader.get("points"))
            elif cell.cell_type == "code":
                cell.outputs = [feedback_text.plain_output(output, where) for output in cell.get("outputs", [])]
            comment = cell.get("metadata", {}).get("nbgrader", {}).get("comment")
            if isinstance(comment, str):
                cell.metadata.nbgrader["comment"] = feedback_text.plain_words(comment, where)
        panel = next((cell for cell in nb.cells if slug and cell.cell_type == "code"
                      and feedback_text.is_progress_panel(cell.source, slug)), None)
        if panel is not None and scores:
            panel.outputs = [feedback_text.progress_panel(slug, scores)]
        return nb, resources

    @staticmethod
    def _cell_namer(nb: NotebookNode, slug: str):
        """Names a cell (by nbclient's index) as a learner finds it: its number from 1 and the lesson whose
        region holds it (from the lesson's ``## 005 ·`` heading to the next ``##`` heading)."""
        by_heading = {lesson.heading: lesson for lesson in lessons_of(slug)} if slug else {}
        lessons, current = [], None
        for cell in nb.cells:
            if cell.cell_type == "markdown" and cell.source.startswith("## "):
                current = by_heading.get(cell.source.splitlines()[0].rstrip())
            lessons.append(current)

        def where(index: int) -> str:
            lesson = lessons[index] if 0 <= index < len(lessons) else None
            return feedback_text.cell_number(index) + (f" (lesson {lesson.code} · {lesson.title})" if lesson else "")
        return where
