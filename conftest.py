"""Session-wide set-up for `make test`: nothing a test does touches the learner's files.

Progress goes to a scratch file (the solved notebooks that nbval runs record
lessons as passed, and their printed XP must match the stored outputs, so no
other test may write there), and grading mode is off unless a test turns it on
for a kernel it starts.
"""

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# Chromium and a page for the browser checks, in tests/ (the instructor's pages) and tests_browser/.
sys.path.insert(0, str(Path(__file__).resolve().parent / "tests_browser"))
pytest_plugins = ["browser_fixtures"]

_scratch = tempfile.mkdtemp(prefix="mct-test-")
atexit.register(shutil.rmtree, _scratch, True)
os.environ["MCT_PROGRESS_FILE"] = os.path.join(_scratch, "progress.json")
os.environ.pop("MCT_GRADING", None)
# Kernels that tests start (nbval, nbclient, nbgrader) draw inline, as in JupyterLab,
# whatever the user's environment says; this process draws off-screen (see below).
os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")


def pytest_configure(config):
    # MiniTorch-style task tags: `pytest -m lesson_007` or `pytest -m part_1`.
    from shared.lessons import LESSONS, PARTS
    for lesson in LESSONS:
        config.addinivalue_line("markers", f"lesson_{lesson.code}: tests of lesson {lesson.code} {lesson.function}")
    for part in PARTS:
        config.addinivalue_line("markers", f"part_{part.number}: tests of part {part.number} ({part.slug})")

    import matplotlib
    matplotlib.use("Agg")
    # Warm matplotlib's font cache so its first-run notice never lands in a cell's output.
    import matplotlib.pyplot  # noqa: F401


def pytest_runtest_setup(item):
    """Each solved notebook starts from an empty progress record, as when `make build` ran it."""
    if item.nodeid.endswith(".ipynb::Cell 0"):
        try:
            os.remove(os.environ["MCT_PROGRESS_FILE"])
        except FileNotFoundError:
            pass


# The files that take longest, started first.  `make test` runs two processes, each taking a
# whole file at a time (`--dist loadfile`) in the order collected: a long file collected last
# would run alone at the end while the other process idles.
LONGEST_FIRST = ("tests/test_nbgrader_loop.py", "tests/test_instructor.py", "tests/test_mutation.py",
                 "tests/test_contract.py", "tests/test_mistakes.py", "tests/test_validate.py",
                 "tests/test_locations.py", "tests/test_technique.py", "tests_browser/test_feedback_page.py",
                 "tests/test_delegation.py", "tests/test_torch_distributed.py", "tests/test_student_notebooks.py",
                 "tests/test_grade.py", "tests/test_part7_reference.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    # A stable sort: every other test (and each notebook's cells) keeps its order.
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@pytest.fixture
def progress_file(tmp_path, monkeypatch):
    """A fresh progress file of the test's own (grading mode off), for the tests that record XP."""
    path = tmp_path / "progress.json"
    monkeypatch.setenv("MCT_PROGRESS_FILE", str(path))
    monkeypatch.delenv("MCT_GRADING", raising=False)
    return path
