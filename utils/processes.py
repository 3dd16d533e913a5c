"""Child servers this project starts: a free port on 127.0.0.1, waiting until one answers, and
stopping one by its pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_healthy(process: subprocess.Popen, health_url: str, timeout: float,
                       headers: dict[str, str] | None = None) -> str | None:
    """Poll `health_url` until it answers with success: None then, otherwise why it did not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return f"exited with code {process.returncode}"
        try:
            httpx.get(health_url, timeout=1.0, headers=headers).raise_for_status()
            return None
        except httpx.HTTPError:
            time.sleep(0.25)
    return f"did not answer on {health_url} within {timeout:.0f} s"


def stop_process(process: subprocess.Popen | None, grace: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited after `grace` seconds."""
    if process is None or process.poll() is not None:
        return
    os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
