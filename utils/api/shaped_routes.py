"""The Anthropic Messages and OpenAI Responses routes (`/v1/messages`, `/v1/responses`) for a server
that answers Ollama's chat in-process, and what they share with the proxy's.

As Ollama v0.32.15 serves them (server/routes.go: AnthropicMessagesMiddleware and ResponsesMiddleware
in front of its ChatHandler): the request is translated into Ollama's chat body (anthropic.py,
responses.py), answered by the server's own /api/chat handler, and the chat answer, whole or streamed,
is written back in the endpoint's shape; every failure is the endpoint's error object with the status
the chat handler chose. The proxy speculates the same translated chat (utils/proxy/app.py
shaped_answer) and answers through the same `Shape`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import FastAPI, Request
from pydantic import ValidationError
from starlette.responses import Response, StreamingResponse

from utils.api import anthropic, openai, responses
from utils.api.http import ApiError, json_response
from utils.api.openai_routes import ChatHandler, failure_message, ollama_messages
from utils.api.schemas import ChatBody

EVENT_STREAM = "text/event-stream"
NO_CACHE = {"Cache-Control": "no-cache"}  # as Ollama's middlewares send their event streams


class Reply(Protocol):
    """One answer in the endpoint's shape, made from Ollama's chat messages."""

    def whole(self, text: str, final: dict[str, Any]) -> dict[str, Any]: ...

    def sse(self, messages: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]: ...


def _never_relaxed(chat: dict[str, Any], message: str) -> dict[str, Any] | None:
    return None


def _openai_error(status: int, message: str) -> dict[str, Any]:
    return openai.error_body(message, openai.error_type(status))


@dataclass(frozen=True)
class Shape:
    """An API that Ollama answers through its chat. `translate`: the request as Ollama's chat body
    (ValueError: refused with 400); `error`: the error body for a status and message; `reply`: the
    answer's writer, for the answering model and the request as sent; `relax`: the chat body to answer
    instead of one the chat handler refused with that message (None: the refusal stands)."""

    path: str
    translate: Callable[[Any], dict[str, Any]]
    error: Callable[[int, str], dict[str, Any]]
    reply: Callable[[str, dict[str, Any]], Reply]
    relax: Callable[[dict[str, Any], str], dict[str, Any] | None] = _never_relaxed
    chat: bool = True  # translated to /api/chat (else /api/generate)

    def failure(self, status: int, message: str) -> Response:
        return json_response(self.error(status, message), status)

    def stream(self, reply: Reply, messages: AsyncIterator[dict[str, Any]]) -> Response:
        return StreamingResponse(reply.sse(messages), media_type=EVENT_STREAM, headers=NO_CACHE)


class _OpenAIReply:
    """OpenAI's answer writer (openai.Reply) as a shape's: the request says whether the stream ends
    with a usage chunk."""

    def __init__(self, chat: bool, model: str, request: dict[str, Any]):
        self.reply = openai.Reply(model, chat)
        self.usage = bool((request.get("stream_options") or {}).get("include_usage"))

    def whole(self, text: str, final: dict[str, Any]) -> dict[str, Any]:
        return self.reply.whole(text, final)

    def sse(self, messages: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
        return self.reply.sse(messages, self.usage)


OPENAI_CHAT = Shape("/v1/chat/completions", openai.chat_body, _openai_error, functools.partial(_OpenAIReply, True))
OPENAI_COMPLETION = Shape("/v1/completions", openai.completion_body, _openai_error,
                          functools.partial(_OpenAIReply, False), chat=False)
MESSAGES = Shape("/v1/messages", anthropic.chat_body, anthropic.error_body, anthropic.Reply, anthropic.relaxed)
RESPONSES = Shape("/v1/responses", responses.chat_body, _openai_error, responses.Reply)
SHAPES = (MESSAGES, RESPONSES)


async def _chat(chat: ChatHandler, body: dict[str, Any], request: Request) -> Response:
    """The chat handler's answer to a chat body; a refusal as the Ollama response it would be."""
    try:
        return await chat(ChatBody.model_validate(body), request)
    except ValidationError as error:
        first = error.errors()[0] if error.errors() else None
        where = ".".join(str(p) for p in first["loc"]) if first else ""
        reason = first["msg"] if first else "invalid request"
        return json_response({"error": f"invalid request: {where} {reason}".strip()}, 400)
    except ApiError as error:
        return json_response({"error": error.message}, error.status)


async def answer(shape: Shape, chat: ChatHandler, request: Request) -> Response:
    """One request of `shape`, answered by the server's chat handler."""
    try:
        sent = json.loads(await request.body())
        body = shape.translate(sent)
    except ValueError as error:  # not JSON, or refused by the translation (AnthropicError, OpenAIError)
        return shape.failure(400, str(error) or "invalid request")
    response = await _chat(chat, body, request)
    message = failure_message(response)
    if message is not None and (relaxed := shape.relax(body, message)) is not None:
        response = await _chat(chat, relaxed, request)
        message = failure_message(response)
    if message is not None:
        return shape.failure(response.status_code, message)
    reply = shape.reply(body["model"], sent)
    if isinstance(response, StreamingResponse):
        return shape.stream(reply, ollama_messages(response.body_iterator))
    final = json.loads(response.body)
    return json_response(reply.whole((final.get("message") or {}).get("content", ""), final))


def install_shaped(app: FastAPI, chat: ChatHandler) -> None:
    """`/v1/messages` and `/v1/responses` on `app`, answered by its `chat` handler."""
    def route(shape: Shape) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            return await answer(shape, chat, request)
        return endpoint

    for shape in SHAPES:
        app.add_api_route(shape.path, route(shape), methods=["POST"], include_in_schema=False)
