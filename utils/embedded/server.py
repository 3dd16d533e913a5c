"""Running the embedded server: in this process (`cli.py serve`) or as a child process we stop by pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from config import Settings
from utils.embedded.store.models import ModelStore
from utils.processes import free_port, stop_process, wait_until_healthy

if TYPE_CHECKING:
    from utils.embedded.http.api import Front

CLI = Path(__file__).resolve().parents[2] / "cli.py"
# How long llama.cpp's OpenMP threads spin before they sleep at a barrier (libgomp reads it when
# llama.cpp loads). Its default spins so long that with another process on one of two cores, the
# thread left without a core stalls every step: 48 greedy tokens of qwen2.5-coder:1.5b took 159 s
# instead of 1.6 s here. Measured on this 2-core machine, one greedy-equality test
# (tests/test_speculative.py, prompt-lookup): beside a busy core 139 s at 2000 and 75 s at 200;
# quiet 48.6 s at 2000 and 49.6-52.8 s at 200. A value set in the environment wins.
SPIN_COUNT = "200"


def load_app():  # noqa: ANN201 - returns create_app, imported here so that the launcher stays light
    """The server's app factory, loaded with llama.cpp's libraries before numpy's (see runtime/runner.py)."""
    os.environ.setdefault("GOMP_SPINCOUNT", SPIN_COUNT)
    import utils.embedded.runtime.runner  # noqa: F401, I001 - first

    from utils.embedded.http.api import create_app

    return create_app


def serve(host: str, port: int, settings: Settings, batch: bool = True,
          speculation: Callable[[ModelStore], tuple[Front, dict[str, str]]] | None = None,
          unspeculated: Callable[[], Front] | None = None) -> None:
    """`cli.py serve`: `speculation(store)` gives the speculating front and the pairs it speculates
    (utils/proxy/in_process.py composes it; this package knows nothing of speculation); None: off, and
    `unspeculated()` the front then, if any (one that counts the answers for /metrics). Each request
    is logged as Ollama logs it (utils/api/request_log.py)."""
    import uvicorn

    from utils.api.request_log import RequestLog

    create_app = load_app()  # llama.cpp first: `speculation` may import what imports numpy
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"warning: listening on {host}: anyone who can reach this address can run the models "
            "and read their answers; the API has no authentication",
            file=sys.stderr,
        )
    _exit_with_parent()
    store = ModelStore(settings.models_dir, settings.source_dirs)
    front, pairs = speculation(store) if speculation else (unspeculated() if unspeculated else None, {})
    said = ", ".join(f"{target}={drafter}" for target, drafter in pairs.items()) or "no model installed"
    print(f"embedded server on http://{host}:{port}; speculation "
          f"{'on: ' + said if speculation else 'off (--no-speculation)'}", file=sys.stderr, flush=True)
    app = create_app(store, threads=os.cpu_count() or 2, batch=batch, fast_batches=settings.fast_batches,
                     gpu_layers=settings.gpu_layers, parallel=settings.num_parallel, front=front)
    uvicorn.run(RequestLog(app), host=host, port=port, log_level="warning", timeout_graceful_shutdown=5)


def _exit_with_parent() -> None:
    """Started as a child (EmbeddedServer sets SPEC_PARENT_PID): stop when that parent is gone, even
    if it was killed without stopping us (a test run ended by a signal), instead of running on."""
    parent = os.environ.get("SPEC_PARENT_PID")
    if not parent or not parent.isdigit():
        return

    def watch() -> None:
        while os.getppid() == int(parent):
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)  # uvicorn's own graceful shutdown

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class EmbeddedServer:
    """`python cli.py serve` on 127.0.0.1 as a child process; `stop()` ends it by its pid. Speculation
    is off unless asked (`args`: more of `cli.py serve`'s options, such as `--pair`): the tests' server
    is the reference that speculative answers are held against."""

    def __init__(self, port: int | None = None, log_path: Path | None = None, batch: bool = True,
                 speculation: bool = False, args: list[str] | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.batch = batch
        self.args = (args or []) + ([] if speculation else ["--no-speculation"])
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> str:
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(
            [sys.executable, str(CLI), "serve", "--host", "127.0.0.1", "--port", str(self.port)]
            + ([] if self.batch else ["--no-batch"]) + self.args,
            stdout=log, stderr=log, start_new_session=True,
            env={**os.environ, "SPEC_PARENT_PID": str(os.getpid())},
        )
        problem = wait_until_healthy(self.process, f"{self.url}/api/version", timeout)
        if problem:
            self.stop()
            raise RuntimeError(f"the embedded server {problem}")
        return self.url

    def stop(self) -> None:
        stop_process(self.process, grace=15)

    def __enter__(self) -> EmbeddedServer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
