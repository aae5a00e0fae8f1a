"""Chromium and a page for every browser check, in tests/ and tests_browser/ (the root conftest.py loads this).

Debian's Chromium (/usr/bin/chromium) is driven through Playwright's ``executable_path``; Playwright's own
browser download is never used.  Without that Chromium every browser check is skipped, with the reason.
"""

from __future__ import annotations

import pytest

from lab_driver import CHROMIUM, CHROMIUM_ARGS, VIEWPORT


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


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport=VIEWPORT)
    tab = context.new_page()
    tab.set_default_timeout(60_000)
    yield tab
    context.close()
