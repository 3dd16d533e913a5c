"""The proxy's HTTP app: speculate where the engine answers exactly, forward everything else.

`/api/generate` and `/api/chat` for a target with a paired drafter run the speculative engine
against the upstream server (the draft on `draft_host` if given); every other request, and those
the routing sends on (see routing.py), goes upstream unchanged. `GET /metrics` serves Prometheus
counters; `GET /api/proxy/recent` the latest requests for the app's traffic page.
"""

from __future__ import annotations

import asyncio
import json
import re
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import FastAPI, Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse

from utils.api import openai
from utils.api.cors import add_cors
from utils.api.http import MAX_BODY_BYTES, NDJSON, json_response
from utils.engine.client import ContextFull, OllamaServer
from utils.engine.config import EngineConfig
from utils.engine.decoder import SpeculativeDecoder, build_decoder
from utils.engine.drafters import Drafter
from utils.engine.events import GenerationError
from utils.engine.planning import Plan
from utils.errors import SpecError
from utils.proxy import answers
from utils.proxy.forward import forward
from utils.proxy.metrics import ProxyMetrics
from utils.proxy.routing import Forward, Speculation, plan

SEEDED_REASON = "a seeded sampled answer is repeatable only in standard generation"
CONTEXT_REASON = "the prompt is longer than the context: upstream truncates it"


@dataclass
class ProxyConfig:
    upstream: str  # the Ollama that answers everything, and verifies drafts
    pairs: dict[str, str]  # target model -> drafter choice ("lookup" or a draft model)
    engine: EngineConfig
    draft_host: str | None = None  # where draft models run, if not upstream
    api_key: str | None = None  # required as a bearer token on every request when set
    origins: list[str] = field(default_factory=list)  # allowed CORS origins beyond Ollama's defaults
    k: int | None = None  # a fixed draft length for every speculated answer; None: the controller's choice


class _Drafters:
    """One drafter per target, built on first use (a drafter holds no per-answer state)."""

    def __init__(self, config: ProxyConfig, target: OllamaServer, draft: OllamaServer):
        self.config, self.target, self.draft = config, target, draft
        self.built: dict[str, Drafter | None] = {}
        self.lock = asyncio.Lock()

    async def decoder(self, model: str) -> SpeculativeDecoder:
        engine = self.config.engine
        async with self.lock:
            if model not in self.built:  # build_decoder answers Ollama's own 404 for an unknown model
                built = await build_decoder(engine, self.target, model, self.config.pairs[model], self.draft)
                self.built[model] = built.drafter
        return SpeculativeDecoder(self.target, model, self.built[model], engine)


def _forwarded(plan: Plan) -> tuple[str, str] | None:
    """(code, reason) for an answer upstream gives exactly as the engine would, faster: any answer the
    plan makes standard, and a seeded sampled one (which sample a seed draws depends on how the answer
    is cut into rounds: only upstream's standard generation repeats it)."""
    if plan.code is not None and plan.reason is not None:
        return plan.code, plan.reason
    if plan.sampling.seed is not None and not plan.sampling.greedy:
        return "option:seed", SEEDED_REASON
    return None


def create_proxy(config: ProxyConfig) -> FastAPI:
    upstream_http = httpx.AsyncClient(base_url=config.upstream.rstrip("/"),
                                      timeout=httpx.Timeout(config.engine.request_timeout,
                                                            connect=config.engine.connect_timeout))
    target = OllamaServer(config.upstream, connect_timeout=config.engine.connect_timeout,
                          timeout=config.engine.request_timeout)
    draft = (OllamaServer(config.draft_host, connect_timeout=config.engine.connect_timeout,
                          timeout=config.engine.draft_timeout) if config.draft_host else target)
    drafters = _Drafters(config, target, draft)
    metrics = ProxyMetrics()

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        await upstream_http.aclose()
        await target.aclose()
        if draft is not target:
            await draft.aclose()

    app = FastAPI(title="Speculative Ollama proxy", lifespan=lifespan, openapi_url=None, docs_url=None,
                  redoc_url=None)
    app.state.metrics = metrics
    add_cors(app, config.origins)

    @app.middleware("http")
    async def authorize(request: Request, call_next):
        if config.api_key and request.method != "OPTIONS":
            if request.headers.get("authorization", "") != f"Bearer {config.api_key}":
                return json_response({"error": "unauthorized: this proxy needs 'Authorization: Bearer <key>'"}, 401)
        return await call_next(request)

    # The key is the proxy's, not upstream's: it is not sent on.
    drop = frozenset({"authorization"}) if config.api_key else frozenset()

    def client_of(request: Request) -> str:
        return request.client.host if request.client else ""

    @app.get("/metrics")
    async def prometheus() -> Response:
        return PlainTextResponse(metrics.prometheus(), media_type="text/plain; version=0.0.4")

    @app.get("/api/proxy/recent")
    async def recent() -> Response:
        return json_response({"upstream": config.upstream, "pairs": config.pairs, "requests": list(metrics.recent)})

    async def speculate_or_forward(request: Request, chat: bool) -> Response:
        endpoint = request.url.path
        body_bytes = await request.body()
        if len(body_bytes) > MAX_BODY_BYTES:
            return json_response({"error": f"request body larger than {MAX_BODY_BYTES} bytes"}, 413)
        try:
            body: Any = json.loads(body_bytes)
        except ValueError:
            body = None
        decision = plan(body, chat, config.pairs, config.k)
        if isinstance(decision, Forward):
            model = body.get("model", "") if isinstance(body, dict) else ""
            metrics.observe_forward(client_of(request), endpoint, str(model), decision.code, decision.reason)
            return await forward(request, upstream_http, body_bytes, drop)
        return await _speculate(request, decision, chat, endpoint, body_bytes)

    async def _answer(request: Request, job: Speculation, chat: bool, endpoint: str, body_bytes: bytes):
        """The answer's Ollama messages, started: a failure before any text is an error Response."""
        try:
            decoder = await drafters.decoder(job.model)
            answer_plan = await decoder.plan(job.request)
            if passed := _forwarded(answer_plan):  # upstream answers it exactly: pass the bytes on
                metrics.observe_forward(client_of(request), endpoint, job.model, *passed)
                return await forward(request, upstream_http, body_bytes, drop)
            stream = answers.events(decoder, job.request, answer_plan)
            first = await anext(stream)  # a failure before any text gets a status, as Ollama's would
        except SpecError as error:
            cause = error.cause if isinstance(error, GenerationError) else error
            if isinstance(cause, ContextFull):  # the engine never cuts a context; upstream truncates it
                metrics.observe_forward(client_of(request), endpoint, job.model, "context", CONTEXT_REASON)
                return await forward(request, upstream_http, body_bytes, drop)
            return json_response({"error": error.message}, error.status or 500)
        client = client_of(request)

        async def replay():
            yield first
            async for event in stream:
                yield event

        def done(stats) -> None:
            metrics.observe_answer(client, endpoint, stats)
            if job.keep_alive is not None:  # the model's residency is upstream's: pass the request on
                asyncio.get_running_loop().create_task(_keep_alive(job.model, job.keep_alive, job.request.options))

        return answers.messages(job.model, chat, replay(), done)

    async def _speculate(request: Request, job: Speculation, chat: bool, endpoint: str, body_bytes: bytes) -> Response:
        answer = await _answer(request, job, chat, endpoint, body_bytes)
        if isinstance(answer, Response):
            return answer
        if job.stream:
            return StreamingResponse(answers.ndjson(answer), media_type=NDJSON)
        whole = await _whole(request, answer)
        if isinstance(whole, Response):
            return whole
        text, last = whole
        last["message" if chat else "response"] = {"role": "assistant", "content": text} if chat else text
        return json_response(last)

    async def _keep_alive(model: str, keep_alive: Any, options: dict[str, Any]) -> None:
        # With the answer's options: another num_ctx would make Ollama reload the model.
        try:
            await upstream_http.post("/api/generate", json={"model": model, "keep_alive": keep_alive,
                                                            "options": options})
        except httpx.HTTPError:
            pass  # residency is advice to upstream; the answer is already complete

    async def _whole(request: Request, answer) -> tuple[str, dict[str, Any]] | Response:
        """A non-streamed answer, joined. A client that goes away stops the work (the answer's
        generators are closed, which closes their upstream requests)."""
        work = asyncio.get_running_loop().create_task(answers.joined(answer))
        watcher = asyncio.get_running_loop().create_task(_closed(request))
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
        except GenerationError as error:
            return json_response({"error": error.message}, error.status or 500)

    async def _openai(request: Request, chat: bool) -> Response:
        endpoint = request.url.path
        body_bytes = await request.body()
        try:
            body = json.loads(body_bytes)
            translated = openai.chat_body(body) if chat else openai.completion_body(body)
        except (ValueError, openai.OpenAIError) as error:  # upstream's own layer answers these its way
            metrics.observe_forward(client_of(request), endpoint, "", "invalid", str(error))
            return await forward(request, upstream_http, body_bytes, drop)
        decision = plan(translated, chat, config.pairs, config.k)
        if isinstance(decision, Forward):
            metrics.observe_forward(client_of(request), endpoint, translated["model"], decision.code, decision.reason)
            return await forward(request, upstream_http, body_bytes, drop)
        answer = await _answer(request, decision, chat, endpoint, body_bytes)
        if isinstance(answer, StreamingResponse):  # sent upstream after all: upstream's own answer
            return answer
        if isinstance(answer, Response):  # Ollama's {"error"} becomes OpenAI's error object
            message = json.loads(answer.body).get("error", "")
            return json_response(openai.error_body(message), answer.status_code)
        reply = openai.Reply(decision.model, chat)
        if decision.stream:
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(reply.sse(answer, usage), media_type="text/event-stream")
        whole = await _whole(request, answer)
        if isinstance(whole, Response):
            return whole
        return json_response(reply.whole(*whole))

    def route(handler, chat: bool):
        async def endpoint(request: Request) -> Response:
            return await handler(request, chat)
        return endpoint

    for path, handler, is_chat in (("/api/generate", speculate_or_forward, False),
                                   ("/api/chat", speculate_or_forward, True),
                                   ("/v1/completions", _openai, False),
                                   ("/v1/chat/completions", _openai, True)):
        app.add_api_route(path, route(handler, is_chat), methods=["POST"])

    @app.api_route("/{path:path}", methods=["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
    async def passthrough(request: Request, path: str) -> Response:
        code = re.sub(r"[^a-z0-9/]", "", request.url.path.lower())[:40] or "/"
        metrics.observe_forward(client_of(request), request.url.path, "", "endpoint", f"{code} is not speculated")
        return await forward(request, upstream_http, None, drop)

    return app


async def _closed(request: Request) -> None:
    while not await request.is_disconnected():
        await asyncio.sleep(0.05)


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")

