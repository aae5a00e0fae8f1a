"""Fixtures of the browser test (`make test-browser`): a JupyterLab on a scratch copy of the course.

Chromium and a page come from browser_fixtures.py (loaded for every test by the root conftest.py).
"""

from __future__ import annotations

import pytest

from lab_driver import RESULTS, SCREENSHOTS, copy_course, start_test_lab


@pytest.fixture(scope="session")
def course_lab(browser, tmp_path_factory):
    """JupyterLab serving a scratch copy of the course, with its own settings and progress file."""
    scratch = tmp_path_factory.mktemp("lab")
    root = copy_course(scratch / "course")
    server = start_test_lab(root, scratch / "server")
    server.root = root
    server.progress_file = scratch / "server" / "progress.json"
    yield server
    server.stop()


def pytest_terminal_summary(terminalreporter):
    if not RESULTS:
        return
    write = terminalreporter.write_line
    terminalreporter.section("what a learner sees in JupyterLab (headless Chromium)")
    write(f"{'notebook':<48} {'math expressions':>16} {'figures':>8} {'seconds':>8}")
    for row in RESULTS:
        figures = "-" if row["figures"] is None else str(row["figures"])
        write(f"{row['notebook']:<48} {row['math']:>16} {figures:>8} {row['seconds']:>8.1f}")
    if SCREENSHOTS.is_dir():
        write(f"screenshots: {SCREENSHOTS}/")
