"""``JudgeLessons``, after execution: every lesson's verdict, in place of its test cell's outputs."""

from __future__ import annotations

import json
from typing import Any

from nbformat import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Integer

from shared.lessons import lesson as find_lesson, lesson_of_grade_id

from .. import judge, rules
from ..feedback_text import lesson_of_test_cell
from ..protocol import ANSWERS_MIME, Reason
from .base import part_slug
from .preparecases import drawn_cases


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
        slug = part_slug(resources)
        drawn = drawn_cases.pop(slug)
        mct = resources.setdefault("mct", {})
        answers, refused = mct.get("answers", {}), mct.get("refused", [])
        findings = mct.get("rules") or rules.Findings()
        verdicts, cells = [], {}
        last_code = ""
        died_at = mct.get("died_at")  # (SandboxedExecute: the cell where the last run's kernel died, if it did)
        stopped = set(mct.get("stopped_cells", []))  # cells where an earlier run's kernel died: not run again
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            _, others = _answers_in(cell)  # nothing of the kind can be left; dropped all the same
            lesson = lesson_of_test_cell(cell)
            if lesson is not None:
                if index in stopped or (answers.get(index) is None and died_at is not None and died_at <= index):
                    verdicts.append(_stopped_by(lesson.code, index, index if index in stopped else died_at, nb))
                else:
                    verdicts.append(_solution_missing(lesson, index, answers.get(index), nb, stopped)
                                    or self._judge(lesson.code, index, last_code, answers, refused, drawn))
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


def _stopped_by(code: str, index: int, died_at: int, nb: NotebookNode) -> judge.Verdict:
    """The verdict of a lesson whose test cell sent no answers because the kernel died at cell ``died_at``
    (0-based, as ``index``): where, and whose cell that was, so that the learner knows which cell to fix."""
    if died_at == index:
        return judge.Verdict(code, False, "no answers reached the grader: the grading kernel stopped while this test "
                                          "cell ran (os._exit, a crash, or one of the sandbox's limits on memory, "
                                          "processes or time: does the function need far more of them than the "
                                          "lesson?)", Reason.NO_ANSWERS)
    grade_id = str(nb.cells[died_at].get("metadata", {}).get("nbgrader", {}).get("grade_id", ""))
    owner = lesson_of_grade_id(grade_id)
    whose = f"lesson {owner.code}'s cell" if owner is not None else "a cell of your own, not a lesson's"
    return judge.Verdict(code, False, f"no answers reached the grader: the grading kernel stopped at cell "
                                      f"{died_at + 1} ({whose}), before this test cell ran (os._exit, a crash, or one "
                                      f"of the sandbox's limits on memory, processes or time), and the notebook's "
                                      f"time or runs left for grading it again without that cell were used up; fix "
                                      f"or remove what that cell does", Reason.NO_ANSWERS)


def _solution_missing(lesson, index: int, payload: dict | None, nb: NotebookNode,
                      stopped: set[int]) -> judge.Verdict | None:
    """The verdict of a lesson whose function was not defined when its test cell (cell ``index``) ran because
    its Implementation cell stands below the test cell (moved, or pasted there) or stopped the grading kernel
    (one of ``stopped``, not run again), else None: "not defined" alone would send the learner looking for a
    cell that is there."""
    if not (isinstance(payload, dict) and payload.get("status") == "not_defined"):
        return None
    found = next((at for at, cell in enumerate(nb.cells) if cell.get("metadata", {}).get("nbgrader", {})
                  .get("grade_id") == lesson.solution_grade_id), None)
    if found in stopped:
        return judge.Verdict(lesson.code, False, f"`{lesson.function}` was not defined when its test cell ran: "
                                                 f"its Implementation cell (cell {found + 1}) stopped the grading "
                                                 f"kernel and was not run again", Reason.NO_ANSWERS)
    if found is None or found < index:
        return None
    return judge.Verdict(lesson.code, False, f"`{lesson.function}` was not defined when its test cell (cell "
                                             f"{index + 1}) ran: its Implementation cell is below it (cell "
                                             f"{found + 1}); move it back above its test cell", Reason.NOT_STARTED)


def _refusal_output(why: str) -> NotebookNode:
    text = f"answers refused: {why} (this notebook needs a human look)"
    return NotebookNode(output_type="error", ename="AnswersRefused", evalue=text, traceback=[text])


def _apply_rules(verdict: judge.Verdict, findings: rules.Findings) -> judge.Verdict:
    """A lesson whose graded code breaks the rules gets no points (a scratch cell that breaks them costs
    nothing: it was skipped)."""
    mine = findings.of_lesson(verdict.code)
    if mine:
        function = find_lesson(verdict.code).function
        return judge.Verdict(verdict.code, False, f"{mine[0].lesson_message(function)} (listed for a human look)",
                             Reason.RULES)
    return verdict
