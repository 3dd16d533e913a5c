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

# Installed before any page script: reads what the app's server sends over Streamlit's websocket (one
# ForwardMsg per frame; its top-level protobuf fields say what it is), so a test waits on what the
# server did, not on what a busy browser happened to draw (React may batch a quick run's "running"
# and "notRunning" into one render, or many partial texts into one). window.__runs counts:
# - completed: full script runs finished (script_finished 0 or 1; 2 is "stopped for a rerun", and
#   the next run follows; 3 is a fragment's run), and busy: one under way (set by new_session);
# - asked: the runs the browser asked for (a rerun_script message, as a widget or page link sends).
# The partial answer texts sent (a delta holding the typing cursor ▌) are counted, distinct, in
# window.__stream.partials once driving.WATCH_STREAM has set it up.
WATCH_RUNS = """
if (window.top === window) (() => {  // the app's page, not a frame inside it
window.__runs = {completed: 0, busy: false, asked: 0};
sessionStorage.setItem('loads', String(Number(sessionStorage.getItem('loads') || 0) + 1));
const CURSOR = [0xe2, 0x96, 0x8c];  // ▌ in UTF-8
const fields = (bytes) => {  // top-level field number -> varint value (or true) of a protobuf message
  const found = {};
  let at = 0;
  const varint = () => { let value = 0, shift = 0, byte;
    do { byte = bytes[at++]; value += (byte & 0x7f) * 2 ** shift; shift += 7; } while (byte & 0x80);
    return value; };
  while (at < bytes.length) {
    const key = varint(), number = Math.floor(key / 8), wire = key % 8;
    if (wire === 0) found[number] = varint();
    else if (wire === 2) { const length = varint(); at += length; found[number] = true; }
    else if (wire === 1) { at += 8; found[number] = true; }
    else if (wire === 5) { at += 4; found[number] = true; }
    else break;
  }
  return found;
};
const hasCursor = (bytes) => bytes.some((b, i) => b === CURSOR[0] && bytes[i + 1] === CURSOR[1]
                                                  && bytes[i + 2] === CURSOR[2]);
const onFrame = (data) => {
  if (!(data instanceof ArrayBuffer)) return;
  const bytes = new Uint8Array(data), msg = fields(bytes);
  if (msg[4]) window.__runs.busy = true;  // new_session: a run started
  if (6 in msg && msg[6] !== 3) {  // script_finished, not a fragment's
    window.__runs.busy = msg[6] === 2;  // stopped for a rerun: the next run follows
    if (msg[6] !== 2) window.__runs.completed += 1;
  }
  if (msg[5] && window.__stream && hasCursor(bytes)) {  // a delta drawing a partial answer
    const partial = Array.from(bytes).join(',');
    if (!window.__stream.sent.has(partial)) { window.__stream.sent.add(partial); window.__stream.partials += 1; }
  }
};
const Native = window.WebSocket;
window.WebSocket = class extends Native {
  constructor(...args) {
    super(...args);
    this.addEventListener('message', (event) => onFrame(event.data));
  }
  send(data) {  // a BackMsg: count those asking for a run (rerun_script, field 11)
    const bytes = data instanceof ArrayBuffer ? new Uint8Array(data) : ArrayBuffer.isView(data)
      ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength) : null;
    if (bytes && fields(bytes)[11]) window.__runs.asked += 1;
    return super.send(data);
  }
};
})();
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
