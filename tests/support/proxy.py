"""`python cli.py proxy`, started as a user would, on a free port, and stopped by its pid."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.models import ROOT
from utils.processes import free_port, stop_process, wait_until_healthy


@contextmanager
def running_proxy(upstream: str, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "proxy", "--upstream", upstream,
                                "--port", str(port), *args], cwd=ROOT, env={**os.environ, **(env or {})},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        problem = wait_until_healthy(process, f"http://127.0.0.1:{port}/metrics", 60)
        assert problem is None, problem
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(process, grace=10)
