"""`cli.py proxy` started as a user starts it, for the tests that drive it with real clients."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from utils.processes import free_port, stop_process, wait_until_healthy

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def proxy(upstream: str, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """`python cli.py proxy` on a free port, stopped by pid whatever happens."""
    port = free_port()
    log = open(ROOT / "artifacts" / "tmp" / f"proxy-{port}.log", "wb") if (ROOT / "artifacts" / "tmp").is_dir() \
        else subprocess.DEVNULL
    process = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "proxy", "--upstream", upstream,
                                "--port", str(port), *args], cwd=ROOT, env={**os.environ, **(env or {})},
                               stdout=log, stderr=log, start_new_session=True)
    try:
        key = (env or {}).get("SPEC_API_KEY")
        problem = wait_until_healthy(process, f"http://127.0.0.1:{port}/metrics", 60,
                                     headers={"Authorization": f"Bearer {key}"} if key else None)
        assert problem is None, problem
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(process, grace=10)
