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

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from fastapi import FastAPI, Request
from pydantic import ValidationError
from starlette.responses import Response, StreamingResponse

from utils.api import anthropic, openai, responses
from utils.api.http import ACCEPTED, TRUNCATED, ApiError, json_response
from utils.api.openai_routes import ChatHandler, failure_message, ollama_messages
from utils.api.schemas import ChatBody

EVENT_STREAM = "text/event-stream"
FIRST_PING_SECONDS = 1.0  # a speculated Messages answer with no token by then begins with a ping
KEEPALIVE_SECONDS = 5.0  # and pings this often until its first token
PING = b'event: ping\ndata: {"type": "ping"}\n\n'  # Anthropic's keep-alive event
NO_CACHE = {"Cache-Control": "no-cache"}  # as Ollama's middlewares send their event streams


class Reply(Protocol):
    """One answer in the endpoint's shape, made from Ollama's chat messages."""

    def whole(self, text: str, final: dict[str, Any]) -> dict[str, Any]: ...

    def sse(self, messages: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]: ...


class KeptAlive(Reply, Protocol):
    """A reply whose stream can begin before the answer does (Anthropic's: `pings`)."""

    def start(self) -> bytes: ...

    def sse(self, messages: AsyncIterator[dict[str, Any]], started: bool = False) -> AsyncIterator[bytes]: ...


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
    pings: bool = False  # a stream kept alive with ping events while the prompt is read (Anthropic's)

    def failure(self, status: int, message: str) -> Response:
        return json_response(self.error(status, message), status)

    def stream(self, reply: Reply, messages: AsyncIterator[dict[str, Any]]) -> Response:
        body = _pinging(cast(KeptAlive, reply), messages) if self.pings else reply.sse(messages)
        return StreamingResponse(body, media_type=EVENT_STREAM, headers=NO_CACHE)


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
MESSAGES = Shape("/v1/messages", anthropic.chat_body, anthropic.error_body, anthropic.Reply, anthropic.relaxed,
                 pings=True)
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


async def _answered(shape: Shape, chat: ChatHandler, body: dict[str, Any], request: Request) -> Response:
    """The chat handler's response to the translated body, or to its relaxed form where it refused it."""
    response = await _chat(chat, body, request)
    message = failure_message(response)
    if message is not None and (relaxed := shape.relax(body, message)) is not None:
        response = await _chat(chat, relaxed, request)
    return response


async def answer(shape: Shape, chat: ChatHandler, request: Request) -> Response:
    """One request of `shape`, answered by the server's chat handler. A streamed Messages answer begins
    as soon as its prompt is queued for the model (ACCEPTED), before its first token, and pings until
    that comes (`begun`): until then a refusal is still an error status, as Ollama's."""
    try:
        sent = json.loads(await request.body())
        body = shape.translate(sent)
    except ValueError as error:  # not JSON, or refused by the translation (AnthropicError, OpenAIError)
        return shape.failure(400, str(error) or "invalid request")
    request.scope[ACCEPTED] = accepted = asyncio.Event()
    answered = asyncio.ensure_future(_answered(shape, chat, body, request))
    if shape.pings and body.get("stream"):
        waiting = asyncio.ensure_future(accepted.wait())
        await asyncio.wait({answered, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if not answered.done():
            return begun(shape.reply(body["model"], sent), answered, _answer_messages)
    response = await answered
    if (message := failure_message(response)) is not None:
        return shape.failure(response.status_code, message)
    reply = shape.reply(body["model"], sent)
    cut = {TRUNCATED: response.headers[TRUNCATED]} if TRUNCATED in response.headers else {}
    if isinstance(response, StreamingResponse):
        streamed = shape.stream(reply, ollama_messages(response.body_iterator))
        streamed.headers.update(cut)
        return streamed
    final = json.loads(response.body)
    whole = json_response(reply.whole((final.get("message") or {}).get("content", ""), final))
    whole.headers.update(cut)
    return whole


async def _pings(reply: KeptAlive, waiting: asyncio.Future[Any]) -> AsyncIterator[bytes]:
    """Anthropic's stream begun before its answer: message_start and a ping, as Anthropic's API begins
    every stream, then a ping every KEEPALIVE_SECONDS until `waiting` is done (the prompt read), so
    that a client with a read timeout (Claude Code) does not give up and send the whole prompt again.
    A client that leaves meanwhile cancels `waiting`, which stops the reading."""
    try:
        yield reply.start()
        while True:
            yield PING
            done, _ = await asyncio.wait({waiting}, timeout=KEEPALIVE_SECONDS)
            if done:
                return
    finally:
        waiting.cancel()  # nothing if it is done; else the client has left


def begun(reply: Reply, pending: asyncio.Future[Any],
          then: Callable[[Any], AsyncIterator[dict[str, Any]]]) -> StreamingResponse:
    """A streamed Messages answer begun before `pending` is done (the proxy still deciding, a speculated
    answer's prompt being read): message_start and pings until it is, then the messages `then` makes of
    its result. A client that leaves meanwhile cancels `pending`."""
    kept = cast(KeptAlive, reply)

    async def body() -> AsyncIterator[bytes]:
        async for chunk in _pings(kept, pending):
            yield chunk
        async for chunk in kept.sse(then(pending.result()), started=True):
            yield chunk
    return StreamingResponse(body(), media_type=EVENT_STREAM, headers=NO_CACHE)


def _answer_messages(response: Response) -> AsyncIterator[dict[str, Any]]:
    """The chat handler's answer as messages; a failure after the stream began is its `error` event."""
    if isinstance(response, StreamingResponse):  # a streamed answer is a 200
        return ollama_messages(response.body_iterator)
    return one({"error": failure_message(response) or "the answer was not streamed"})


async def _pinging(reply: KeptAlive, messages: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Answer messages as Anthropic's events, pinging while the first is awaited for longer than
    FIRST_PING_SECONDS (a speculated answer's stream begins before its prompt is read)."""
    first = asyncio.ensure_future(anext(messages))
    try:
        started = not (await asyncio.wait({first}, timeout=FIRST_PING_SECONDS))[0]
        if started:
            async for chunk in _pings(reply, first):
                yield chunk
    finally:
        first.cancel()  # nothing if it is done
    try:
        head = first.result()
    except StopAsyncIteration:
        return
    async for chunk in reply.sse(_chained(one(head), messages), started=started):
        yield chunk


async def one(message: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    yield message


async def _chained(*parts: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    for part in parts:
        async for message in part:
            yield message


def install_shaped(app: FastAPI, chat: ChatHandler) -> None:
    """`/v1/messages` and `/v1/responses` on `app`, answered by its `chat` handler."""
    def route(shape: Shape) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            return await answer(shape, chat, request)
        return endpoint

    for shape in SHAPES:
        app.add_api_route(shape.path, route(shape), methods=["POST"], include_in_schema=False)
