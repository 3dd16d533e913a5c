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
    """The proxy's URL; its log goes to artifacts/tmp/ where that folder exists; `SPEC_API_KEY` in
    `env` is sent with the health check."""
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
        if log is not subprocess.DEVNULL:
            log.close()
