"""``SandboxedExecute``: nbgrader's Execute, taking each lesson's answers from the message itself."""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from nbclient.exceptions import DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute

from shared.lessons import lesson_of_grade_id

from .. import judge, redact, rules, sandbox
from ..feedback_text import lesson_of_test_cell
from ..protocol import (ANSWERS_MIME, CELL_OUTPUT_BYTES_ENV, NOTEBOOK_OUTPUT_BYTES_ENV, REVEAL_DIR_HOST_ENV,
                        RUN_BROKEN_CELLS_ENV, RUN_DEMOS_ENV)
from . import spare
from .base import part_slug

# For the sandbox's own tests only: cells that break the rules run all the same (graded code still costs its
# lessons), so that what the sandbox must stop reaches it.
RUN_BROKEN_CELLS = os.environ.get(RUN_BROKEN_CELLS_ENV) == "1"
# The course's demonstrations (cells tagged demo in the masters) grade nothing: they are not run while grading
# unless MCT_RUN_DEMOS=1 (tests/test_nbgrader_loop.py grades the solved notebooks both ways).
RUN_DEMOS = os.environ.get(RUN_DEMOS_ENV) == "1"

# Output a notebook may send, counted in this process as it arrives (what is past a budget is dropped at
# once, never held): per cell, per notebook, and per message (ZeroMQ refuses a larger one unread).
CELL_OUTPUT_BYTES = int(os.environ.get(CELL_OUTPUT_BYTES_ENV, 2 * 2**20))
NOTEBOOK_OUTPUT_BYTES = int(os.environ.get(NOTEBOOK_OUTPUT_BYTES_ENV, 8 * 2**20))
OUTPUT_MESSAGES = ("stream", "display_data", "execute_result", "error", "update_display_data")

KERNEL_DIED_HERE = ("the grading kernel died here (os._exit, a crash, or one of the sandbox's limits on memory, "
                    "processes or time)")
KERNEL_DIED = f"{KERNEL_DIED_HERE}: the cells below did not run and their lessons get no points; this notebook needs " \
              f"a human look"
# A cell where the kernel died is not run again: the notebook runs once more from its start, in a new kernel,
# without it (at most PASSES runs in all, within the notebook's own time limit; see SandboxedExecute).
PASSES = 3
RERUN_MIN_SECONDS = 5  # a run again needs at least this much of the notebook's time left
NOT_RUN_AGAIN = "the notebook was graded again from its start without this cell"


def _skipped_output(found: list) -> NotebookNode:
    """What a cell that breaks the rules shows instead of running: a scratch cell, one plain line (it costs
    nothing); graded code of a lesson, why it was not run (its lesson's verdict says what it cost)."""
    graded = [f for f in found if f.lesson is not None]
    if not graded:
        return NotebookNode(output_type="stream", name="stdout", text=found[0].scratch_note())
    lessons = ", ".join(sorted({f.lesson for f in graded}))
    text = (f"not run: {graded[0].message()}; this cell is graded code of lesson {lessons} (this notebook needs "
            f"a human look)")
    return NotebookNode(output_type="error", ename="RulesBroken", evalue=text, traceback=[text])


def _lessons_after(nb: NotebookNode, index: int) -> bool:
    """Whether a lesson's test cell stands below cell ``index`` (a run again would grade it)."""
    return any(lesson_of_test_cell(cell) is not None for cell in nb.cells[index + 1:])


def _not_run_again(cell: NotebookNode, stopped_for: str | None) -> list:
    """The outputs a cell where the kernel died shows once the notebook runs again without it: what it showed
    before the kernel died, and why it was not run again.  It lists nothing for a human: it cost nothing but that
    cell.  ``stopped_for``: why the grader stopped the kernel, if it did (kernelmanager.MessageBudget)."""
    shown = [output for output in cell.get("outputs", []) if output.get("ename") != "KernelDied"]
    why = f"{stopped_for}: the kernel was stopped; {NOT_RUN_AGAIN}" if stopped_for else \
        f"{KERNEL_DIED_HERE}: {NOT_RUN_AGAIN}"
    return shown + [NotebookNode(output_type="error", ename="KernelDied", evalue=why, traceback=[why])]


class SandboxedExecute(Execute):
    """nbgrader's Execute, but a cell that stops the kernel costs only what that cell does.

    nbgrader gives up a whole notebook when its kernel dies.  Here the cell where it died says so, and the
    notebook runs again from its start in a new kernel without that cell, so that a scratch cell that ran out of
    memory or called ``os._exit`` costs the lessons after it nothing: at most ``PASSES`` runs in all, and only
    within the notebook's own time limit (a run again gets what is left of it, never a clock of its own).  When
    no run again is possible, the cells already run keep their answers (the judge grades them) and the cells
    after the one where the kernel died are marked as not run.
    """

    _mct_notebook_bytes = _mct_cell_bytes = 0  # output counted so far (see _within_output_budget)
    _mct_cut = False
    _mct_next_launched = True  # (preprocess sets it False: a kernel is launched for the next notebook once)
    _mct_seconds_left: int | None = None  # a run again: the notebook's seconds left (its kernel's wall clock)
    _mct_stopped: Mapping[int, list] = MappingProxyType({})  # (preprocess gives each notebook its own)

    def preprocess(self, nb, resources=None, km=None):
        """Run ``nb``; again without each cell where its kernel died, while that is worth it and time is left."""
        started = time.monotonic()
        self._mct = (resources if resources is not None else {}).setdefault("mct", {})
        self._mct_stopped = {}  # index of a cell where a run's kernel died -> what it shows in the runs after
        self._mct_seconds_left = None
        for run in range(PASSES):
            self._died_at = self._stopped_for = None
            self._mct_notebook_bytes = 0  # (the cell's count starts again in preprocess_cell)
            self._mct.update(answers={}, refused=[], died_at=None, stopped_cells=sorted(self._mct_stopped))
            self._mct_next_launched = False
            nb, resources = super().preprocess(nb, resources, km)
            left = sandbox.notebook_seconds() - (time.monotonic() - started)
            if self._died_at is None or run == PASSES - 1 or left < RERUN_MIN_SECONDS \
                    or not _lessons_after(nb, self._died_at):
                break
            self.log.warning("the kernel died at cell %d: the notebook runs again without it (%.0f s left)",
                             self._died_at, left)
            self._mct_stopped[self._died_at] = _not_run_again(nb.cells[self._died_at], self._stopped_for)
            self._mct_seconds_left, km = math.floor(left), None  # a new kernel, whose clock has what is left
        return nb, resources

    def create_kernel_manager(self):
        """The kernel launched for this notebook while the one before ran (grading.preprocessors.spare), if any;
        for a run again, always a new one (the spare waiting is the next notebook's)."""
        if self._mct_seconds_left is not None:
            km = super().create_kernel_manager()
            km.mct_notebook_seconds = self._mct_seconds_left  # its wall clock: what is left of the notebook's
            return km
        km = spare.take(self)
        if km is None:
            return super().create_kernel_manager()
        self.log.info(spare.TAKEN_LOG)
        self.km = km
        return km

    def preprocess_cell(self, cell, resources, index):
        if index in self._mct_stopped:  # its kernel died in an earlier run: it is not run again
            cell.outputs = self._mct_stopped[index]
            return cell, resources
        if not self._mct_next_launched:  # this notebook's kernel is ready: the next notebook's boots meanwhile
            self._mct_next_launched = True
            if self._a_notebook_follows(resources):
                spare.launch_for_next(self)
        self._mct_cell_bytes, self._mct_cut = 0, False
        if cell.cell_type == "code" and not RUN_DEMOS and rules.course_cells(part_slug(resources)).is_demo(cell.source):
            cell.outputs = []  # a demonstration of the course's: nothing graded depends on it (tools/build.py)
            return cell, resources
        findings = self._mct.get("rules")
        if findings is not None and index in findings.skipped and not RUN_BROKEN_CELLS:
            cell.outputs = [_skipped_output(findings.at(index))]
            return cell, resources
        if findings is not None and index in findings.trimmed and not RUN_BROKEN_CELLS:
            return self._run_trimmed(cell, resources, index, findings.trimmed[index])
        revealed = self._reveal_building_blocks(cell)
        try:
            return self._run_cell(cell, resources, index)
        finally:
            if revealed is not None:
                revealed.unlink(missing_ok=True)

    def _run_trimmed(self, cell, resources, index, trimmed: rules.ScratchLines):
        """Run what of the cell keeps the rules (its scratch lines left out, rules.check_notebook), then give the
        cell back its own source, with a note of what was left out first among its outputs."""
        source = cell.source
        cell.source = trimmed.source
        try:
            cell, resources = self._run_cell(cell, resources, index)
        finally:
            cell.source = source
        note = NotebookNode(output_type="stream", name="stdout", text=trimmed.note())
        cell.outputs = [note, *cell.get("outputs", [])]
        return cell, resources

    def _a_notebook_follows(self, resources) -> bool:
        """Whether this nbgrader command grades another notebook after this one (of the same part).

        nbgrader's converter (the exporter's parent) found the submission folders in ``submitted`` and grades them
        in sorted order, but for the students it excludes, and each folder's notebooks in sorted order.  True
        when that cannot be read: a kernel launched for nothing is only waste."""
        converter = getattr(self.parent, "parent", None)
        info = resources.get("nbgrader", {})
        try:
            coursedir = converter.coursedir
            folder = re.compile(coursedir.format_path(coursedir.submitted_directory, "(?P<student>.+)",
                                                      re.escape(info["assignment"]), escape=True) + "$")
            students = [folder.match(path) for path in sorted(converter.assignments)]
            if not all(students):
                return True
            students = [match["student"] for match in students]
            excluded = set(coursedir.student_id_exclude.split(","))
            later = [s for s in students[students.index(info["student"]) + 1:] if s not in excluded]
            last_notebook = Path(sorted(converter.notebooks)[-1]).stem == info["notebook"]
        except Exception:
            return True
        return bool(later) or not last_notebook

    def process_message(self, msg, cell, cell_index):
        """Every message of the running cell: answers are taken out here and never reach the notebook."""
        if str(msg.get("msg_type", "")).startswith("comm_"):
            return None  # widget (comm) messages: nothing graded, and no widget state kept (counted all the same)
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
        lesson = lesson_of_test_cell(cell)
        own_cell = lesson is not None
        content = msg.get("content") or {}
        # jupyter_client decoded this message for us alone (it never reaches the notebook): its JSON
        # values are plain already, so the payload is kept as it is (a copy cost 0.05 s a notebook)
        payload = content["data"][ANSWERS_MIME]
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
                # (nbclient's index, from 0: the feedback page names the cell as a learner counts, with its lesson)
                cell.outputs = [NotebookNode(output_type="stream", name="stdout",
                                             text=f"[not run: the kernel died at cell {self._died_at}]\n")]
            return cell, resources
        try:
            return super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self._died_at = index
            self._mct["died_at"] = index  # the judge names it in the verdicts of the lessons it stopped
            budget = getattr(self.km, "mct_budget", None)  # stopped for what it sent (kernelmanager.MessageBudget)
            self._stopped_for = budget.reason if budget is not None and budget.stopped else None
            why = (budget.stopped if budget is not None else None) or KERNEL_DIED
            self.log.warning("the kernel died at cell %d: %s", index, why)
            cell.outputs = list(cell.get("outputs", [])) + [NotebookNode(
                output_type="error", ename="KernelDied", evalue=why, traceback=[why])]
            return cell, resources
