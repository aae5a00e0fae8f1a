"""``PrepareCases``, before execution: this run's cases, and what the sandboxed kernel may read."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from nbformat import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

from .. import judge, kernel_tree, zygote
from ..protocol import CASES_FILE_HOST_ENV, KERNEL_TREE_HOST_ENV, REVEAL_DIR_HOST_ENV
from .base import part_slug

RUN_SEED = judge.run_seed()  # one per nbgrader process (tools/instructor.py gives all of a run the same)

#: part slug -> this notebook's cases (judge side only), from PrepareCases to JudgeLessons.
drawn_cases: dict[str, dict[str, list]] = {}


class PrepareCases(NbGraderPreprocessor):
    """Draw this run's cases and put what the sandboxed kernel may read where it can read it: the
    cases' inputs, and the kernel's own tree of modules (:mod:`grading.kernel_tree`).

    Both depend only on the part and the run's seed, so they are made once per part for every
    notebook this nbgrader process grades (bound read-only into each sandbox), and removed at exit."""

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]):
        _start_the_zygote()  # its imports overlap the part's set-up below (the first notebook's kernel waits for it)
        slug = part_slug(resources)
        drawn = judge.draw_part(slug, RUN_SEED)
        drawn_cases[slug] = drawn
        folder = _prepared(slug, drawn)
        os.environ[CASES_FILE_HOST_ENV] = str(folder / "cases.json")
        os.environ[KERNEL_TREE_HOST_ENV] = str(folder / "tree")
        os.environ[REVEAL_DIR_HOST_ENV] = str(folder / "reveal")
        self.log.info("grading %s with run seed %d", slug, RUN_SEED)
        return nb, resources


def _start_the_zygote() -> None:
    """Start the warm kernels' zygote (grading/zygote.py) now, if it is wanted and not running; a failure here
    is said, and met again, when the first kernel asks for it (it then starts from cold)."""
    try:
        zygote.start_soon()
    except (OSError, KeyError):
        pass


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
