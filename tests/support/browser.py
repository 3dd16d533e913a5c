"""Starting the app for the browser tests (`streamlit run app.py` on a fresh data folder) and looking
at its processes; tests/e2e/conftest.py holds the fixtures that use them, tests/support/driving.py
the clicks and waits."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.models import DRAFT
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


def _wait_healthy(process: subprocess.Popen, url: str, log_path: Path) -> None:
    if problem := wait_until_healthy(process, f"{url}/_stcore/health", APP_START_TIMEOUT):
        raise RuntimeError(f"streamlit {problem}:\n{log_path.read_text()[-3000:]}")
