"""The proxy's HTTP app: speculate where the engine answers exactly, forward everything else.

Module-level routes (as vLLM's api_router) over one `ProxyState` on `app.state.proxy`; what each answer
becomes is decided in one place, serving.decide. `/api/generate` and `/api/chat` for a target with a
paired drafter run the speculative engine against the upstream server (the draft on `draft_host` if
given); `/v1/completions` and `/v1/chat/completions` do the same through OpenAI's shapes, and
`/v1/messages` (Anthropic) and `/v1/responses` (OpenAI Responses) through theirs, as the chats they
translate to (utils/api/shaped_routes.py); every other request goes upstream unchanged. `GET /metrics`
serves Prometheus counters; `GET /api/proxy/recent` the latest requests for the app's traffic page.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse

from utils.api.cors import add_cors
from utils.api.http import MAX_BODY_BYTES, NDJSON, client_gone, json_response
from utils.api.openai_routes import ollama_messages
from utils.api.shaped_routes import (
    FIRST_PING_SECONDS,
    MESSAGES,
    OPENAI_CHAT,
    OPENAI_COMPLETION,
    RESPONSES,
    Shape,
    begun,
)
from utils.burst import events_asked, opted_out
from utils.engine.events import GenerationError
from utils.proxy import answers
from utils.proxy.event_stream import event_answer
from utils.proxy.forward import Inner, forward
from utils.proxy.routing import Forward
from utils.proxy.serving import ProxyConfig, ProxyState, Refused, Started, decide

__all__ = ["ProxyConfig", "create_proxy", "is_loopback"]

router = APIRouter()


def state_of(request: Request) -> ProxyState:
    """The proxy's state, or the embedded server's speculating front's (front.py puts it in the scope)."""
    return request.scope.get("speculation") or request.app.state.proxy


def client_of(request: Request) -> str:
    return request.client.host if request.client else ""


async def passed_on(request: Request, model: str, decision: Forward, body: bytes | None) -> Response:
    """Upstream's own answer to the request, with why it went there counted."""
    state = state_of(request)
    state.metrics.observe_forward(client_of(request), request.url.path, model, decision.code, decision.reason,
                                  decision.tools)
    if state.local is not None:  # inside the embedded server: its own stack answers, in process
        return Inner(state.local, body)
    return await forward(request, state.upstream, body, state.drop)


@router.get("/metrics")
async def prometheus(request: Request) -> Response:
    return PlainTextResponse(state_of(request).metrics.prometheus(), media_type="text/plain; version=0.0.4")


@router.get("/api/proxy/recent")
async def recent(request: Request) -> Response:
    config = state_of(request).config
    return json_response({"upstream": config.upstream, "pairs": config.pairs,
                          "requests": list(state_of(request).metrics.recent)})


OPTED_OUT = Forward("header", "the client asked for standard generation (X-Speculation: off)")


async def ollama_answer(request: Request, chat: bool) -> Response:
    if opted_out(request.headers):
        return await passed_on(request, "", OPTED_OUT, None)
    body_bytes = await request.body()
    if len(body_bytes) > MAX_BODY_BYTES:
        return json_response({"error": f"request body larger than {MAX_BODY_BYTES} bytes"}, 413)
    try:
        body: Any = json.loads(body_bytes)
    except ValueError:
        body = None
    if events_asked(request.headers):  # the app: the engine's events, whatever the answer
        return await event_answer(state_of(request), body, chat, request.headers, client_of(request),
                                  request.url.path)
    decision = await decide(state_of(request), body, chat, client_of(request), request.url.path)
    if isinstance(decision, Forward):
        model = body.get("model", "") if isinstance(body, dict) else ""
        return await passed_on(request, str(model), decision, body_bytes)
    if isinstance(decision, Refused):
        return json_response({"error": decision.message}, decision.status)
    if decision.job.stream:
        return StreamingResponse(answers.ndjson(decision.messages), media_type=NDJSON)
    whole = await _whole(request, decision.messages)
    if isinstance(whole, Response):
        return whole
    text, last = whole
    if chat:
        last["message"] = {**last["message"], "content": text}  # with the answer's tool calls, if any
    else:
        last["response"] = text
    return json_response(last)


async def openai_answer(request: Request, chat: bool) -> Response:
    return await shaped_answer(request, OPENAI_CHAT if chat else OPENAI_COMPLETION)


async def shaped_answer(request: Request, shape: Shape) -> Response:
    """A request in another API's shape (OpenAI's, Anthropic's Messages, OpenAI's Responses), decided as
    the Ollama body it translates to and answered in its own shape. A request the translation refuses
    goes upstream, whose own layer answers it its way."""
    if opted_out(request.headers):
        return await passed_on(request, "", OPTED_OUT, None)
    body_bytes = await request.body()
    try:
        body = json.loads(body_bytes)
        translated = shape.translate(body)
    except ValueError as error:  # the translations' refusals (OpenAIError, AnthropicError) are ValueErrors
        return await passed_on(request, "", Forward("invalid", str(error)), body_bytes)
    decided = asyncio.ensure_future(_decided(request, shape, translated))
    if shape.pings and translated.get("stream"):
        # A speculated answer is decided once its first token is made, after its prompt is read: a
        # stream not decided by then begins now and pings meanwhile, as a standard one does.
        await asyncio.wait({decided}, timeout=FIRST_PING_SECONDS)
        if not decided.done():
            return begun(shape.reply(translated["model"], body), decided, lambda late: _late(request, *late))
    decision, translated = await decided
    if isinstance(decision, Forward):
        return await passed_on(request, translated["model"], decision, body_bytes)
    if isinstance(decision, Refused):  # Ollama's {"error"} in the shape's error object
        return shape.failure(decision.status, decision.message)
    reply = shape.reply(decision.job.model, body)
    if decision.job.stream:
        return shape.stream(reply, decision.messages)
    whole = await _whole(request, decision.messages, shape.failure)
    if isinstance(whole, Response):
        return whole
    return json_response(reply.whole(*whole))


async def _decided(request: Request, shape: Shape, chat: dict[str, Any]) -> tuple[Forward | Refused | Started,
                                                                                 dict[str, Any]]:
    """The decision on a translated chat, and the chat decided."""
    decision = await decide(state_of(request), chat, shape.chat, client_of(request), request.url.path)
    # A refusal the shape relaxes (Claude Code's `effort` asked of a model that cannot think, which
    # Ollama answers without thinking) is decided again relaxed, here rather than upstream: speculated.
    refusal = decision.message if isinstance(decision, Refused) else getattr(decision, "reason", "")
    if refusal and (relaxed := shape.relax(chat, refusal)) is not None:
        chat = relaxed
        decision = await decide(state_of(request), chat, shape.chat, client_of(request), request.url.path)
    return decision, chat


async def _late(request: Request, decision: Forward | Refused | Started,
                chat: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """The Ollama messages of a decision made after its stream began (`begun`). One passed on is
    upstream's answer to the translated chat (what upstream's own translation would answer)."""
    if isinstance(decision, Refused):
        yield {"error": decision.message}
        return
    if isinstance(decision, Started):
        async for message in decision.messages:
            yield message
        return
    state = state_of(request)
    state.metrics.observe_forward(client_of(request), request.url.path, chat["model"], decision.code,
                                  decision.reason, decision.tools)
    async with state.upstream.stream("POST", "/api/chat" if "messages" in chat else "/api/generate",
                                     json=chat) as response:
        if response.status_code != 200:
            yield {"error": json.loads(await response.aread()).get("error", f"status {response.status_code}")}
            return
        async for message in ollama_messages(response.aiter_bytes()):
            yield message


def _ollama_failure(status: int, message: str) -> Response:
    return json_response({"error": message}, status)


async def _whole(request: Request, messages: AsyncIterator[dict[str, Any]],
                 failure: Callable[[int, str], Response] = _ollama_failure) -> tuple[str, dict[str, Any]] | Response:
    """A non-streamed answer, joined. A client that goes away stops the work (the answer's generators
    are closed, which closes their upstream requests)."""
    work = asyncio.get_running_loop().create_task(answers.joined(messages))
    watcher = asyncio.get_running_loop().create_task(client_gone(request))
    try:
        await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not work.done():
        work.cancel()  # the cancellation closes the answer's generators, and their upstream requests
        await asyncio.gather(work, return_exceptions=True)
        return Response(status_code=499)
    try:
        return work.result()
    except GenerationError as error:  # in the answer's shape
        return failure(error.status or 500, error.message)


async def passthrough(request: Request) -> Response:
    code = re.sub(r"[^a-z0-9/]", "", request.url.path.lower())[:40] or "/"
    return await passed_on(request, "", Forward("endpoint", f"{code} is not speculated"), None)


def _answering(handler: Callable[[Request, Any], Awaitable[Response]], how: Any):
    """A route for `handler(request, how)`: `how` is whether it chats, or the API's shape."""
    async def endpoint(request: Request) -> Response:
        return await handler(request, how)
    return endpoint


# The answers the engine may speculate, then everything else (last: it matches every path).
for _path, _handler, _chat in (("/api/generate", ollama_answer, False), ("/api/chat", ollama_answer, True),
                               ("/v1/completions", openai_answer, False),
                               ("/v1/chat/completions", openai_answer, True)):
    router.add_api_route(_path, _answering(_handler, _chat), methods=["POST"])
for _shape in (MESSAGES, RESPONSES):  # Anthropic's Messages and OpenAI's Responses, translated to chats
    router.add_api_route(_shape.path, _answering(shaped_answer, _shape), methods=["POST"])
router.add_api_route("/{path:path}", passthrough, methods=["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])


def create_proxy(config: ProxyConfig) -> FastAPI:
    state = ProxyState(config)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        await state.aclose()

    app = FastAPI(title="Speculative Ollama proxy", lifespan=lifespan, openapi_url=None, docs_url=None,
                  redoc_url=None)
    app.state.proxy = state
    add_cors(app, config.origins)

    @app.middleware("http")
    async def authorize(request: Request, call_next):
        if config.api_key and request.method != "OPTIONS":
            if request.headers.get("authorization", "") != f"Bearer {config.api_key}":
                return json_response({"error": "unauthorized: this proxy needs 'Authorization: Bearer <key>'"}, 401)
        return await call_next(request)

    app.include_router(router)
    return app


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")
