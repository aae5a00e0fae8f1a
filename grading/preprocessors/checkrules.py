"""``CheckRules``, before execution: every cell the learner wrote or changed, read against the rules."""

from __future__ import annotations

from typing import Any

from nbformat import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

from .. import rules
from .base import part_slug


class CheckRules(NbGraderPreprocessor):
    """Read every cell the learner wrote or changed against the rules for graded code, before it runs."""

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]):
        findings = rules.check_notebook(nb.cells, part_slug(resources))
        resources.setdefault("mct", {})["rules"] = findings
        for found in findings.cells:
            log = self.log.warning if found.lesson else self.log.info  # (a scratch cell is skipped, and costs nothing)
            log("%s breaks the rules for graded code: %s", found.where(), "; ".join(str(b) for b in found.breaks[:3]))
        for index, trimmed in sorted(findings.trimmed.items()):
            self.log.info("cell %d runs without its lines %s: %s", index + 1, trimmed.lines, trimmed.breaks[0])
        return nb, resources
