"""The browser tests' fixtures: `streamlit run app.py` on the test session's embedded server, and
Debian's Chromium driven headless by Playwright (sync API).

Playwright cannot download its own browsers here; scripts/install_browser.sh installs /usr/bin/chromium.
Without it these tests fail with that instruction rather than being skipped.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from config import Settings
from tests.conftest import DRAFT, SMALL
from utils.processes import free_port, stop_process, wait_until_healthy

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("SPEC_E2E_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TARGET = DRAFT  # qwen2.5-coder:0.5b: readable answers for the screenshots, quick enough on two cores
SMALL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"  # SMALL's file in the models folder
VIEWPORT = {"width": 1400, "height": 1000}
APP_START_TIMEOUT = 60  # seconds until Streamlit answers its health check

# Installed before any page script: counts the runs of the Streamlit script, so a test can wait for
# the rerun its click caused to finish (stApp carries data-test-script-state="running"/"notRunning").
WATCH_RUNS = """
window.__scriptRuns = 0;
sessionStorage.setItem('loads', String(Number(sessionStorage.getItem('loads') || 0) + 1));
new MutationObserver((mutations) => {
  for (const m of mutations) {
    if (m.target.getAttribute('data-test-script-state') === 'running') window.__scriptRuns += 1;
  }
}).observe(document, {subtree: true, attributes: true, attributeFilter: ['data-test-script-state']});
"""


@dataclass
class RunningApp:
    url: str
    process: subprocess.Popen  # `streamlit run app.py`
    data_dir: Path


@contextmanager
def running_app(data_dir: Path, **env_vars: str) -> Iterator[RunningApp]:
    """`streamlit run app.py` on 127.0.0.1 with a fresh data folder, stopped by its pid at the end."""
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPEC_") and key != "OLLAMA_HOST"}
    env.update(SPEC_DATA_DIR=str(data_dir), STREAMLIT_BROWSER_GATHER_USAGE_STATS="false", **env_vars)
    log_path = data_dir / "streamlit.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "streamlit"), "run", "app.py", "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(process, url, log_path)
        yield RunningApp(url, process, data_dir)
    finally:
        stop_process(process, grace=15)  # the embedded server it started, if any, follows it (SPEC_PARENT_PID)


@pytest.fixture(scope="module")
def app_url(server_url: str, tmp_path_factory) -> Iterator[str]:
    """The app, as a user starts it, on the test server (OLLAMA_HOST), with a fresh data folder."""
    with running_app(tmp_path_factory.mktemp("e2e-data"), OLLAMA_HOST=server_url, SPEC_TARGET_MODEL=TARGET) as app:
        yield app.url


@pytest.fixture(scope="module")
def own_server_app(tmp_path_factory) -> Iterator[RunningApp]:
    """The app with no OLLAMA_HOST: it starts its own embedded server, as on a fresh install. Its data
    folder holds only the smallest model, linked from the shared one (read, never written), so the
    server's first look at every model's tokenizer stays cheap."""
    data_dir = tmp_path_factory.mktemp("e2e-own-server")
    shared = Settings().models_dir
    (data_dir / "models").mkdir()
    for name in (SMALL_FILE, SMALL_FILE + ".verified"):
        (data_dir / "models" / name).symlink_to(shared / name)
    with running_app(data_dir, SPEC_TARGET_MODEL=SMALL) as app:
        yield app


def child_pids(pid: int) -> list[int]:
    """The processes `pid` started and that still run (Linux /proc)."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(child) for child in (task / "children").read_text().split()]
    return children


def embedded_server_pid(app: RunningApp) -> int:
    """The pid of the embedded server the app started: its child running `cli.py serve`."""
    servers = [pid for pid in child_pids(app.process.pid)
               if b"serve" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
    assert len(servers) == 1, f"the app runs {len(servers)} embedded servers"
    return servers[0]


def server_pid(url: str) -> int | None:
    """The pid of the embedded server (`cli.py serve`) listening on `url`'s port; None when it runs
    elsewhere (OLLAMA_HOST_FOR_TESTS)."""
    port = url.rsplit(":", 1)[1].strip("/")
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in args and b"--port" in args and args[args.index(b"--port") + 1] == port.encode():
            return int(proc.name)
    return None


def cores_used(pid: int, seconds: float) -> float:
    """How many cores the process (all its threads) kept busy over the next `seconds` (Linux /proc)."""
    def cpu() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    before, started = cpu(), time.monotonic()
    time.sleep(seconds)
    return (cpu() - before) / (time.monotonic() - started)


def _wait_healthy(process: subprocess.Popen, url: str, log_path: Path) -> None:
    if problem := wait_until_healthy(process, f"{url}/_stcore/health", APP_START_TIMEOUT):
        raise RuntimeError(f"streamlit {problem}:\n{log_path.read_text()[-3000:]}")


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
