"""A recording pass-through, for tests that check what a client (the proxy) sent upstream.

    with Tap(server_url) as tap:          # 127.0.0.1, a free port, its own thread and event loop
        ... point the proxy at tap.url ...
        tap.bodies("/api/generate")       # the JSON bodies it passed on to that path, in order

Every request goes on to the real server unchanged (the project's own pass-through, utils/proxy/
forward.py) and its answer comes back unchanged; nothing is faked.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from utils.processes import free_port
from utils.proxy.forward import forward

METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]


class Tap:
    def __init__(self, upstream: str):
        self.upstream, self.port = upstream.rstrip("/"), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.received: list[tuple[str, str, Any]] = []  # (method, path, JSON body or None)
        self._lock = threading.Lock()
        app = Starlette(routes=[Route("/{path:path}", self._pass, methods=METHODS)])
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                     lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._client: httpx.AsyncClient | None = None

    async def _pass(self, request: Request) -> Response:
        body = await request.body()
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        with self._lock:
            self.received.append((request.method, request.url.path, parsed))
        if self._client is None:
            self._client = httpx.AsyncClient(base_url=self.upstream, timeout=httpx.Timeout(600, connect=10))
        return await forward(request, self._client, body)

    def bodies(self, path: str) -> list[Any]:
        with self._lock:
            return [body for _, where, body in self.received if where == path]

    def clear(self) -> None:
        with self._lock:
            self.received.clear()

    def start(self) -> Tap:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the tap did not start in 30 s")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> Tap:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
