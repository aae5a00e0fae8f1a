"""Fixtures of the browser test (`make test-browser`): Chromium, a JupyterLab on a scratch copy, a page.

Debian's Chromium (/usr/bin/chromium) is driven through Playwright's
``executable_path``; Playwright's own browser download is never used. Without
that Chromium every browser test is skipped, with the reason.
"""

from __future__ import annotations

import pytest

from lab_driver import CHROMIUM, CHROMIUM_ARGS, RESULTS, SCREENSHOTS, VIEWPORT, copy_course, start_test_lab


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found: install Debian's chromium (apt-get install -y chromium) "
                    "to run the browser test")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


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


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport=VIEWPORT)
    tab = context.new_page()
    tab.set_default_timeout(60_000)
    yield tab
    context.close()


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
