"""The embedded server's speculating front (`cli.py serve`): the proxy's answers, made in process.

An ASGI middleware of the embedded server's app (utils/embedded/http/api.py `create_app(front=...)`),
outside the server's own stack and inside its CORS. `/api/generate`, `/api/chat`, `/v1/completions`,
`/v1/chat/completions`, `/v1/messages` and `/v1/responses` go through the very routes of the proxy
(app.py: `decide`, the same routing, statistics, `speculative` object and `/metrics`), but the engine
verifies on the server's in-process target (no HTTP and no JSON per round), and what is not
speculated is handed down to the server's own stack, in process, as it came. A request with
`X-Speculation: off` (utils/burst.py), such as each of the engine's own requests over HTTP, goes
straight down without its body being read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from utils.api.http import json_response
from utils.api.shaped_routes import MESSAGES, RESPONSES
from utils.burst import opted_out
from utils.engine.target import Target
from utils.proxy.app import ollama_answer, openai_answer, prometheus, recent, shaped_answer
from utils.proxy.metrics import ProxyMetrics
from utils.proxy.serving import ProxyConfig, ProxyState

Route = Callable[[Request], Awaitable[Response]]
ROUTES: dict[tuple[str, str], Route] = {
    ("POST", "/api/generate"): lambda request: ollama_answer(request, False),
    ("POST", "/api/chat"): lambda request: ollama_answer(request, True),
    ("POST", "/v1/completions"): lambda request: openai_answer(request, False),
    ("POST", "/v1/chat/completions"): lambda request: openai_answer(request, True),
    ("POST", MESSAGES.path): lambda request: shaped_answer(request, MESSAGES),
    ("POST", RESPONSES.path): lambda request: shaped_answer(request, RESPONSES),
    ("GET", "/metrics"): prometheus,
    ("GET", "/api/proxy/recent"): recent,
}


class SpeculatingFront:
    """`app`: the server's stack below the front; `target`: the engine's in-process target on it;
    `about`: the stack's `/api/version`, which the front answers with `speculation_events` added (the
    app asks for an answer's events where the server says it streams them: event_stream.py)."""

    def __init__(self, app: ASGIApp, target: Target, config: ProxyConfig, about: dict[str, Any]):
        self.app = app
        self.state = ProxyState(config, target=target, local=app)
        self.about = {**about, "speculation_events": True}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (scope["method"], scope["path"]) == ("GET", "/api/version"):
            return await json_response(self.about)(scope, receive, send)  # whoever asks, opted out or not
        route = ROUTES.get((scope["method"], scope["path"])) if scope["type"] == "http" else None
        if route is None or opted_out(scope["headers"]):
            return await self.app(scope, receive, send)
        scope["speculation"] = self.state  # read by the proxy's routes (app.state_of)
        response = await route(Request(scope, receive))
        await response(scope, receive, send)


class CountingFront:
    """`cli.py serve --no-speculation`'s front: every request goes down to the server's own stack as it
    came, and `/metrics` counts the answers it passed on (reason `off`), as the speculating front counts
    those it does not speculate, so that a dashboard reads the server the same way in either mode."""

    REASON = "speculation is off (cli.py serve --no-speculation)"

    def __init__(self, app: ASGIApp, **_: Any):  # create_app's Front: `models` and `about` are not needed
        self.app, self.metrics = app, ProxyMetrics()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        asked = (scope["method"], scope["path"]) if scope["type"] == "http" else None
        if asked == ("GET", "/metrics"):
            return await PlainTextResponse(self.metrics.prometheus(), media_type="text/plain; version=0.0.4")(
                scope, receive, send)
        if asked is not None and asked in ROUTES and asked[0] == "POST":
            client = scope["client"][0] if scope.get("client") else ""
            self.metrics.observe_forward(client, scope["path"], "", "off", self.REASON)
        await self.app(scope, receive, send)
