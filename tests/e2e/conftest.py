"""The browser tests' fixtures: `streamlit run app.py` on the test session's embedded server, and
Debian's Chromium driven headless by Playwright (sync API). How the app is started and its processes
found: tests/support/browser.py.

Playwright cannot download its own browsers here; scripts/install_browser.sh installs /usr/bin/chromium.
Without it these tests fail with that instruction rather than being skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from config import Settings
from tests.support.browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    SMALL_FILE,
    TARGET,
    VIEWPORT,
    WATCH_RUNS,
    RunningApp,
    running_app,
)
from tests.support.models import SMALL

# Playwright's `expect` gives up after 5 s by default: after a wait for the script run, what it looks
# for is drawn at once on a quiet machine, but a busy one can take longer to draw it. A passing check
# returns as soon as it passes, so a generous deadline costs nothing.
expect.set_options(timeout=60_000)


@pytest.fixture
def app_url(server_url: str, tmp_path_factory) -> Iterator[str]:
    """The app, as a user starts it, on the test server (OLLAMA_HOST), with a fresh data folder: one per
    test, since a test may begin where a user begins (no conversations yet) in any order (-p randomly)."""
    with running_app(tmp_path_factory.mktemp("e2e-data"), OLLAMA_HOST=server_url, SPEC_TARGET_MODEL=TARGET) as app:
        yield app.url


@pytest.fixture
def own_server_app(tmp_path_factory) -> Iterator[RunningApp]:
    """The app with no OLLAMA_HOST: it starts its own embedded server, as on a fresh install. Its data
    folder holds only the smallest model, linked from the shared one (read, never written), so the
    server's first look at every model's tokenizer stays cheap. One per test: the app's process keeps
    what its controllers learned and its conversations, and a test begins where a user begins."""
    data_dir = tmp_path_factory.mktemp("e2e-own-server")
    shared = Settings().models_dir
    (data_dir / "models").mkdir()
    for name in (SMALL_FILE, SMALL_FILE + ".verified"):
        (data_dir / "models" / name).symlink_to(shared / name)
    with running_app(data_dir, SPEC_TARGET_MODEL=SMALL) as app:
        yield app


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run `bash scripts/install_browser.sh` (Debian's chromium package)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keeps each phase's report on the test item, so a fixture can tell that its test failed."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


@pytest.fixture
def page(browser: Browser, request, tmp_path) -> Iterator[Page]:
    """A new browser session (its own cookies and Streamlit session) with a presentable window.
    When the test fails, what the page showed is saved and its path printed."""
    context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
    context.add_init_script(WATCH_RUNS)
    page = context.new_page()
    try:
        yield page
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            shot = tmp_path / "failure.png"
            try:
                page.screenshot(path=str(shot), full_page=True)
                print(f"\nthe page at the failure: {shot}")
            except Exception as error:  # noqa: BLE001 - a diagnostic must not hide the failure
                print(f"\nno screenshot of the failure: {error}")
        context.close()
