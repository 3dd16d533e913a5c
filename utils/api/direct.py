"""The requests of a speculative round, served straight from ASGI.

Every draft proposal and every validator burst is one POST, and on this path FastAPI's own machinery
(routing through every route's pattern, dependency solving, two exception middlewares and the body
limit's wrappers around `receive` and `send`) cost about 0.3 ms of a request's 0.9 ms outside the
engine on a 2-core CPU (`cli.py bench-overhead`). `DirectRoutes` answers the few hot routes itself:
it reads the body, validates it as FastAPI would (`json.loads`, then the route's pydantic model) and
calls the same handler. Anything it is not sure to answer exactly as FastAPI would (no
Content-Length, a body over the limit, JSON that does not parse or validate) goes down the ordinary
stack with the body replayed, so errors keep one wording and one status.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from utils.api.http import MAX_BODY_BYTES, ApiError, error_response, replay

Handler = Callable[[Any, Request], Awaitable[Response]]


class DirectRoutes:
    """ASGI middleware: `routes` maps a POST path to (its body model, its handler), the handler being
    the very function FastAPI routes there. Sits inside CORS and the arrival counter, outside the rest."""

    def __init__(self, app: Any, routes: dict[str, tuple[type[BaseModel], Handler]]):
        self.app, self.routes = app, routes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        route = self.routes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        length = _content_length(scope) if route else None
        if route is None or length is None or length > MAX_BODY_BYTES:
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before sending its body
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        model, handler = route
        try:
            parsed = model.model_validate(json.loads(body))
        except (ValueError, RecursionError):  # FastAPI words the refusal (JSON and pydantic errors are ValueErrors)
            return await self.app(scope, replay(body, receive), send)
        try:
            response = await handler(parsed, Request(scope, receive))
        except ApiError as error:
            response = error_response(error)
        await response(scope, receive, send)


def _content_length(scope: dict) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None

