"""Ollama's HTTP conventions: JSON as UTF-8, a body limit, `{"error": ...}` for every failure, NDJSON.

Responses on the hot path are encoded here once, to bytes, and handed to Starlette as they are
(no per-response `jsonable_encoder` walk, no pydantic on the way out).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse as _JSONResponse
from starlette.exceptions import HTTPException
from starlette.responses import Response, StreamingResponse

from utils.errors import SpecError

MAX_BODY_BYTES = 8 * 1024 * 1024
NDJSON = "application/x-ndjson"


class ApiError(SpecError):
    """A refusal or failure, answered as Ollama does: `{"error": message}` with `status`."""

    status: int  # always given (SpecError's is optional)

    def __init__(self, message: str, status: int):
        super().__init__(message, status)


def json_bytes(content: Any) -> bytes:
    """JSON as UTF-8; a lone surrogate from the request (JSON "\\ud800") is written escaped, not a 500."""
    try:
        return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()


class JSONResponse(_JSONResponse):
    def render(self, content: Any) -> bytes:
        return json_bytes(content)


TRUNCATED = "X-Prompt-Truncated"  # "messages=N, tokens=M": left out of the prompt to fit the context
ACCEPTED = "prompt.accepted"  # a request's scope key: an asyncio.Event the server sets once its prompt is queued


def json_response(content: Any, status: int = 200) -> Response:
    """A JSON answer encoded once, bypassing FastAPI's serialization of returned values."""
    return Response(json_bytes(content), status, media_type="application/json")


def ndjson_line(content: Any) -> bytes:
    return json_bytes(content) + b"\n"


class LastLine(bytes):
    """The last bytes of a streamed answer: sent with the end of the response in one write."""


class NdjsonResponse(StreamingResponse):
    """A stream whose iterator may mark its last chunk (`LastLine`). Starlette ends a stream with an
    empty message of its own, a second socket write after the last line (about 0.2 ms on two busy
    cores, and another wake-up of the client) on every draft and every streamed answer."""

    async def stream_response(self, send: Any) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        async for chunk in self.body_iterator:
            last = isinstance(chunk, LastLine)
            body = chunk.encode() if isinstance(chunk, str) else bytes(chunk)
            await send({"type": "http.response.body", "body": body, "more_body": not last})
            if last:
                if close := getattr(self.body_iterator, "aclose", None):
                    await close()  # runs the generator's cleanup now, not when it is collected
                return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def ndjson_response(lines: AsyncIterator[bytes]) -> StreamingResponse:
    return NdjsonResponse(lines, media_type=NDJSON)


def now() -> str:
    """Ollama's `created_at`: UTC with a Z."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


async def client_gone(request: Request) -> None:
    """Returns when the client of `request`, whose body has been read, has gone: the next message the
    server gives is then the disconnect (uvicorn's when the connection closes, an in-process call's
    when its caller stops reading). Asking also resumes reading the connection, without which uvicorn
    would not notice. Awaited, not polled: `is_disconnected()` 20 times a second took about a tenth of
    the event loop's busy time in a speculated answer (py-spy), mostly anyio describing the task it
    cancels."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class BodyLimit:
    """ASGI middleware: request bodies over MAX_BODY_BYTES get 413, whether announced by Content-Length
    or sent chunked (read up to the limit, never further). POST bodies are read as JSON whatever their
    Content-Type, as Ollama does: its documented `curl -d '{...}'` sends a form type."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return await self._too_large(scope, receive, send)
        if scope["method"] == "POST":
            scope = {**scope, "headers": headers + [(b"content-type", b"application/json")]}
        if length is not None or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        body, more = bytearray(), True  # chunked: buffer at most MAX_BODY_BYTES, then hand it on
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > MAX_BODY_BYTES:
                return await self._too_large(scope, receive, send)
        await self.app(scope, replay(bytes(body), receive), send)

    @staticmethod
    async def _too_large(scope: dict, receive: Any, send: Any) -> None:
        response = JSONResponse({"error": f"request body larger than {MAX_BODY_BYTES} bytes"}, 413)
        await response(scope, receive, send)


def replay(body: bytes, receive: Any) -> Callable[[], Awaitable[dict]]:
    """A `receive` that gives a body already read, then whatever the connection says next."""
    replayed = False

    async def receive_again() -> dict:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive_again


def error_response(error: ApiError) -> Response:
    return JSONResponse({"error": error.message}, error.status or 500)


def install_error_handlers(app: FastAPI) -> None:
    """Every failure as Ollama writes it: `{"error": "..."}` with Ollama's status."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, error: ApiError) -> Response:
        return error_response(error)

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, error: HTTPException) -> Response:
        # Unknown paths, wrong methods and bodies that are not JSON (invalid UTF-8): Ollama's shape.
        return JSONResponse({"error": str(error.detail)}, error.status_code, headers=error.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, error: RequestValidationError) -> Response:
        first = error.errors()[0] if error.errors() else {"msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return JSONResponse({"error": f"invalid request: {where} {first['msg']}".strip()}, 400)
