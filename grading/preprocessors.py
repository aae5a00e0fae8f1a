"""The judge inside nbgrader: two preprocessors around nbgrader's ``Execute``.

``PrepareCases`` (before execution) draws the cases of every lesson of the
notebook's part and writes their inputs where the grading kernel will find
them.  ``JudgeLessons`` (after execution) reads the kernel's answers out of
each test cell, judges them (:mod:`grading.judge`), and replaces the cell's
outputs with the verdict; it also drops answer messages from every other cell
and caps each cell's output, so a flood of printing cannot make a huge page.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any

from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Integer

from shared.lessons import lesson as find_lesson, lesson_of_grade_id

from . import judge, redact
from .harness import MIME

CASES_FILE_HOST_ENV = "MCT_CASES_FILE_HOST"  # read by grading.sandbox when it starts a kernel
REDACTED_DIR_ENV = "MCT_REDACTED_DIR"        # helper modules without the part's answers (grading.redact)
REVEAL_DIR_ENV = "MCT_REVEAL_DIR_HOST"       # where a composite lesson's building blocks appear for its cell
RUN_SEED = int(os.environ.get("MCT_RUN_SEED") or secrets.randbits(48))  # one per nbgrader process

_drawn: dict[str, dict[str, list]] = {}  # part slug -> this notebook's cases (judge side only)


def _slug(resources: dict[str, Any]) -> str:
    return str(resources.get("nbgrader", {}).get("assignment", ""))


class PrepareCases(NbGraderPreprocessor):
    """Draw this run's cases and put their inputs where the sandboxed kernel can read them."""

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]):
        slug = _slug(resources)
        drawn = judge.draw_part(slug, RUN_SEED)
        _drawn[slug] = drawn
        folder = Path(tempfile.mkdtemp(prefix="mct-cases-"))
        path = folder / "cases.json"
        path.write_text(json.dumps(judge.kernel_input(slug, drawn), allow_nan=False))
        redacted = folder / "redacted"
        redacted.mkdir()
        for name, text in redact.redacted_sources(slug).items():
            (redacted / name).write_text(text)
            (redacted / name).chmod(0o644)
        reveal = folder / "reveal"
        reveal.mkdir()
        for item in (folder, redacted, reveal):
            item.chmod(0o755)
        path.chmod(0o644)
        os.environ[CASES_FILE_HOST_ENV] = str(path)
        os.environ[REDACTED_DIR_ENV] = str(redacted)
        os.environ[REVEAL_DIR_ENV] = str(reveal)
        resources.setdefault("mct", {})["cases_file"] = str(path)
        self.log.info("grading %s with run seed %d", slug, RUN_SEED)
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

    def preprocess(self, nb, resources=None, km=None):
        self._died_at = None
        return super().preprocess(nb, resources, km)

    def preprocess_cell(self, cell, resources, index):
        revealed = self._reveal_building_blocks(cell)
        try:
            return self._run_cell(cell, resources, index)
        finally:
            if revealed is not None:
                revealed.unlink(missing_ok=True)

    def _reveal_building_blocks(self, cell) -> Path | None:
        """Before a composite lesson's test cell: the helper's versions of the earlier lessons'
        functions it builds on, for this cell only (see grading.redact)."""
        folder = os.environ.get(REVEAL_DIR_ENV)
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


class FreshRuntimeKernelManager(AsyncKernelManager):
    """Each kernel gets a socket folder of its own, removed after it: nothing a notebook leaves
    there (or a chmod of the folder) can reach the next student's kernel."""

    async def _async_pre_start_kernel(self, **kwargs):
        base = Path(os.environ["MCT_PRIVATE_DIR"]) / "runtime"
        base.mkdir(parents=True, exist_ok=True)
        self._mct_folder = Path(tempfile.mkdtemp(prefix="kernel-", dir=base))
        self.connection_file = str(self._mct_folder / "kernel.json")
        self.ip = str(self._mct_folder / "kernel")
        return await super()._async_pre_start_kernel(**kwargs)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        folder = getattr(self, "_mct_folder", None)
        if folder is not None and not restart:
            subprocess_safe_rmtree(folder)


def subprocess_safe_rmtree(folder: Path) -> None:
    """Remove a folder the sandboxed kernel may have made unreadable (chmod 0)."""
    for path in [folder, *folder.rglob("*")] if folder.exists() else []:
        try:
            path.chmod(0o700)
        except OSError:
            pass
    shutil.rmtree(folder, ignore_errors=True)


def _answers_in(cell: NotebookNode) -> tuple[list[dict[str, Any]], list[NotebookNode]]:
    """The answer messages of a cell, and its other outputs."""
    found, others = [], []
    for output in cell.get("outputs", []):
        data = output.get("data", {}) if output.get("output_type") in ("display_data", "execute_result") else {}
        if MIME in data:  # plain JSON again (nbformat hands out its own dict subclass)
            found.append(json.loads(json.dumps(data[MIME])))
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
        cases_file = resources.get("mct", {}).pop("cases_file", None)
        if cases_file:
            shutil.rmtree(Path(cases_file).parent, ignore_errors=True)
        verdicts = []
        last_code = ""
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            found, others = _answers_in(cell)
            meta = cell.metadata.get("nbgrader", {})
            lesson = lesson_of_grade_id(str(meta.get("grade_id", "")))
            if meta.get("grade") and lesson is not None and meta.get("grade_id") == lesson.grade_id:
                code = lesson.code
                mine = [a for a in found if isinstance(a, dict) and a.get("lesson") == code]
                if code < last_code:  # a moved cell could run after a later lesson showed its building blocks
                    verdict = judge.Verdict(code, False, "this test cell was moved below a later lesson's; "
                                                         "no points (this notebook needs a human look)")
                elif len(mine) > 1:
                    verdict = judge.Verdict(code, False, "the test cell sent more than one set of answers; "
                                                         "no points (this notebook needs a human look)")
                else:
                    verdict = judge.judge_lesson(code, drawn.get(code, []), mine[0] if mine else None)
                cell.outputs = [verdict_output(verdict)]
                verdicts.append(verdict)
                last_code = max(last_code, code)
            else:
                cell.outputs = _cap(others, self.max_output_chars)
        resources.setdefault("mct", {})["verdicts"] = verdicts
        return nb, resources


ACTIVE_MIME = ("text/html", "application/javascript", "image/svg+xml", "text/markdown", "text/latex")


class SanitizeFeedback(NbGraderPreprocessor):
    """Nothing from a notebook runs in the browser of whoever opens its feedback page.

    Raw HTML in markdown cells is shown as text (``<`` escaped), and so are links and images
    (``](`` and ``]:`` escaped: a link target, however encoded, is never a live URL), and
    outputs keep only their plain-text and image forms (HTML, JavaScript, SVG and markdown
    outputs are dropped where a plain-text form exists, else replaced by a note).
    """

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]):
        for cell in nb.cells:
            if cell.cell_type in ("markdown", "raw"):
                text = cell.source.replace("<", "&lt;").replace("](", "]&#40;").replace("]:", "]&#58;")
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
        return nb, resources
