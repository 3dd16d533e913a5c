"""One line per request on the server's log, as Ollama's server writes it (its gin logger):

    [GIN] 2026/11/24 - 13:12:08 | 200 |   12.345678ms |       127.0.0.1 | POST     "/api/chat"

the status, the time the answer took (a streamed one until its last byte), the client and the
request. Written to stderr when the answer is complete, whatever its status."""

from __future__ import annotations

import json
import sys
import time
from typing import TextIO

from starlette.types import ASGIApp, Message, Receive, Scope, Send


def go_duration(seconds: float) -> str:
    """A duration as Go's time.Duration prints it ("532.1µs", "12.345678ms", "1.5s", "2m3.5s")."""
    nanoseconds = round(seconds * 1e9)
    if nanoseconds < 1000:
        return f"{nanoseconds}ns"
    for unit, size in (("µs", 1000), ("ms", 1000_000), ("s", 1000_000_000)):
        if nanoseconds < size * (60 if unit == "s" else 1000):
            return f"{nanoseconds / size:.9f}".rstrip("0").rstrip(".") + unit
    minutes, rest = divmod(nanoseconds, 60_000_000_000)
    hours, minutes = divmod(minutes, 60)
    text = f"{rest / 1e9:.9f}".rstrip("0").rstrip(".") + "s"
    return (f"{hours}h" if hours else "") + f"{minutes}m" + text


def gin_line(status: int, seconds: float, client: str, method: str, path: str, now: float | None = None) -> str:
    """gin's default log line, without colours; over a minute the duration is cut to whole seconds."""
    stamp = time.strftime("%Y/%m/%d - %H:%M:%S", time.localtime(now))
    latency = go_duration(int(seconds) if seconds > 60 else seconds)
    return f"[GIN] {stamp} | {status:3d} | {latency:>13} | {client:>15} | {method:<7}  {json.dumps(path)}"


class RequestLog:
    """ASGI middleware, outermost: logs each HTTP request it passes on (the requests a server makes of
    its own stack in process do not pass through it)."""

    def __init__(self, app: ASGIApp, stream: TextIO | None = None):
        self.app, self.stream = app, stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), 500  # an answer that never started is a failure

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            query = scope.get("query_string", b"").decode("latin-1")
            path = scope["path"] + (f"?{query}" if query else "")
            client = scope["client"][0] if scope.get("client") else ""
            print(gin_line(status, time.perf_counter() - start, client, scope["method"], path),
                  file=self.stream or sys.stderr, flush=True)
