"""The OpenAI-compatible routes for a server that answers Ollama's API in-process.

As Ollama's own layer (its middleware/openai.go) does: the OpenAI request is translated into
Ollama's body (openai.py, the same translation the proxy uses), answered by the server's own
/api/chat or /api/generate handler, and the Ollama answer, whole or streamed, is written back as
OpenAI's objects and server-sent events. Every failure is OpenAI's error object with the status the
Ollama handler chose.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any

from fastapi import FastAPI, Request
from pydantic import ValidationError
from starlette.responses import Response, StreamingResponse

from utils.api import openai
from utils.api.http import TRUNCATED, ApiError, json_response
from utils.api.schemas import ChatBody, GenerateBody

ChatHandler = Callable[[ChatBody, Request], Awaitable[Response]]
GenerateHandler = Callable[[GenerateBody, Request], Awaitable[Response]]
ModelList = Callable[[], list[dict[str, Any]]]  # /api/tags entries


def failure(status: int, message: str) -> Response:
    return json_response(openai.error_body(message, openai.error_type(status)), status)


async def ollama_messages(chunks: AsyncIterable[str | bytes | memoryview]) -> AsyncIterator[dict[str, Any]]:
    """An NDJSON body (a StreamingResponse's `body_iterator`) as the messages it carries."""
    buffer = b""
    try:
        async for chunk in chunks:
            buffer += chunk.encode() if isinstance(chunk, str) else bytes(chunk)
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    yield json.loads(line)
        if buffer.strip():
            yield json.loads(buffer)
    finally:
        if hasattr(chunks, "aclose"):
            await chunks.aclose()  # a client that left stops the generation behind it


def failure_message(response: Response) -> str | None:
    """The error message of an Ollama handler's response that is not a 200 (None for a 200)."""
    if response.status_code == 200:
        return None
    try:
        return str(json.loads(response.body).get("error", ""))
    except (AttributeError, ValueError):
        return f"request failed with status {response.status_code}"


def as_openai(response: Response, reply: openai.Reply, stream: bool, include_usage: bool) -> Response:
    """An Ollama handler's response in OpenAI's shape."""
    if (message := failure_message(response)) is not None:
        return failure(response.status_code, message)
    if isinstance(response, StreamingResponse):
        if not stream:  # a body the handler streamed anyway (never for stream: false): joined
            raise ApiError("the answer was streamed where a whole one was asked for", 500)
        messages = ollama_messages(response.body_iterator)
        shaped: Response = StreamingResponse(reply.sse(messages, include_usage), media_type="text/event-stream")
    else:
        final = json.loads(response.body)
        text = (final.get("message") or {}).get("content", "") if reply.chat else final.get("response", "")
        shaped = json_response(reply.whole(text, final))
    if TRUNCATED in response.headers:  # the prompt was cut to fit the context: said as Ollama's answer says it
        shaped.headers[TRUNCATED] = response.headers[TRUNCATED]
    return shaped


def install_openai(app: FastAPI, chat: ChatHandler, generate: GenerateHandler, models: ModelList) -> None:
    """`/v1/chat/completions`, `/v1/completions`, `/v1/models` and `/v1/models/{model}` on `app`."""

    async def answer(request: Request, is_chat: bool) -> Response:
        try:
            raw = json.loads(await request.body())
            translated = openai.chat_body(raw) if is_chat else openai.completion_body(raw)
            body = ChatBody.model_validate(translated) if is_chat else GenerateBody.model_validate(translated)
        except ValidationError as error:
            errors = error.errors()
            where = ".".join(str(p) for p in errors[0]["loc"]) if errors else ""
            reason = errors[0]["msg"] if errors else "invalid request"
            return failure(400, f"invalid request: {where} {reason}".strip())
        except (ValueError, openai.OpenAIError) as error:
            return failure(400, str(error) or "invalid request")
        include_usage = bool((raw.get("stream_options") or {}).get("include_usage"))
        try:
            response = await (chat(body, request) if isinstance(body, ChatBody) else generate(body, request))
        except ApiError as error:
            return failure(error.status, error.message)
        return as_openai(response, openai.Reply(body.model, is_chat), body.stream, include_usage)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await answer(request, True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await answer(request, False)

    @app.get("/v1/models")
    async def list_models() -> Response:
        return json_response({"object": "list", "data": [_model(entry) for entry in models()]})

    @app.get("/v1/models/{model:path}")
    async def retrieve_model(model: str) -> Response:
        for entry in models():
            if model in (entry.get("name"), entry.get("model")):
                return json_response(_model(entry))
        return failure(404, f"model '{model}' not found")


def _model(entry: dict[str, Any]) -> dict[str, Any]:
    """An /api/tags entry as OpenAI's model object (Ollama's ToModel: owned by the name's namespace)."""
    name = entry.get("model") or entry.get("name", "")
    modified = entry.get("modified_at", "")
    try:
        created = int(datetime.fromisoformat(modified.replace("Z", "+00:00")).timestamp())
    except ValueError:
        created = 0
    parts = name.split(":")[0].split("/")
    namespace = parts[-2] if len(parts) >= 2 else "library"
    return {"id": name, "object": "model", "created": created, "owned_by": namespace}
