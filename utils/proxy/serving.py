"""The proxy's one decision, for every /api/generate, /api/chat and /v1/* answer: speculate it, or pass
it on to upstream unchanged (and why), or refuse it as upstream would.

`decide` is the only place where that is decided: first what the request asks for (routing.py), then
how the engine would make the answer (the engine's plan: a thinking model, the model's parameters,
the server's gate, whether speculation has paid lately), then the answer's start (a prompt longer than
the context is upstream's to truncate). A speculated answer is returned started, its first event
already read, so that a failure before any text gets a status, as Ollama's would.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from utils.engine.client import OllamaClient
from utils.engine.config import EngineConfig
from utils.engine.decoder import SpeculativeDecoder, build_decoder
from utils.engine.drafters import Drafter
from utils.engine.events import GenerationError
from utils.engine.memory import EngineMemory
from utils.engine.planning import Plan
from utils.engine.request import GenerationRequest
from utils.engine.stats import AnswerStats
from utils.engine.target import ContextFull, Target
from utils.errors import SpecError
from utils.proxy import answers
from utils.proxy.metrics import ProxyMetrics
from utils.proxy.routing import Forward, Speculation, carries_tools, plan

SEEDED_REASON = "a seeded sampled answer is repeatable only in standard generation"
CONTEXT_REASON = "the prompt is longer than the context: upstream truncates it"


@dataclass
class ProxyConfig:
    upstream: str  # the Ollama that answers everything, and verifies drafts
    pairs: dict[str, str]  # target model -> drafter choice ("suffix", "lookup" or a draft model)
    engine: EngineConfig
    draft_host: str | None = None  # where draft models run, if not upstream
    api_key: str | None = None  # required as a bearer token on every request when set
    origins: list[str] = field(default_factory=list)  # allowed CORS origins beyond Ollama's defaults
    k: int | None = None  # a fixed draft length for every speculated answer; None: the controller's choice


@dataclass
class Refused:
    """A failure before any text: upstream's status and message, as upstream would have answered."""

    status: int
    message: str


@dataclass
class Started:
    """A speculated answer: its Ollama messages (the first one already made), and what was asked."""

    job: Speculation
    messages: AsyncIterator[dict[str, Any]]


class ProxyState:
    """Everything the routes share: the settings, the upstream clients, one drafter per target (built
    on first use; a drafter holds no per-answer state) and the metrics.

    Upstream is an Ollama over HTTP (`cli.py proxy`), or, inside the embedded server (`cli.py serve`,
    front.py), the server's own stack below the speculating front: `local`, an ASGI app answered in
    process, and `target`, its in-process target (utils/embedded/http/target.py)."""

    def __init__(self, config: ProxyConfig, target: Target | None = None, local: Any = None):
        engine = config.engine
        self.config, self.metrics, self.local = config, ProxyMetrics(), local
        transport = httpx.ASGITransport(app=local) if local is not None else None
        self.upstream = httpx.AsyncClient(base_url=config.upstream.rstrip("/"), transport=transport,
                                          timeout=httpx.Timeout(engine.request_timeout, connect=engine.connect_timeout))
        self.target: Target = target or OllamaClient(config.upstream, connect_timeout=engine.connect_timeout,
                                                     timeout=engine.request_timeout)
        self.draft: Target = (OllamaClient(config.draft_host, connect_timeout=engine.connect_timeout,
                                   timeout=engine.draft_timeout) if config.draft_host else self.target)
        # The key is the proxy's, not upstream's: it is not sent on.
        self.drop = frozenset({"authorization"}) if config.api_key else frozenset()
        # One drafter per (model, drafter choice, draft settings), built on first use.
        self._drafters: dict[tuple[str, str, float, int, int], Drafter | None] = {}
        self.memory = EngineMemory()  # what the answers through this proxy learn, for the next ones
        self._lock = asyncio.Lock()

    async def planned(self, model: str, request: GenerationRequest) -> tuple[SpeculativeDecoder, Plan]:
        """The decoder of `model` and its plan for `request`. A drafter is built on the first answer that
        could be speculated at all: a thinking answer or a grammar never loads a draft model."""
        engine, drafter = self.config.engine, self.config.pairs[model]
        built = self._drafters.get(key := _key(model, drafter, engine))
        decoder = SpeculativeDecoder(self.target, model, built, engine, self.memory)
        answer_plan = await decoder.plan(request)
        if key in self._drafters or answer_plan.standard:
            return decoder, answer_plan
        decoder = await self.decoder(model, drafter, engine)
        return decoder, await decoder.plan(request)

    async def decoder(self, model: str, drafter: str, engine: EngineConfig) -> SpeculativeDecoder:
        """A decoder of `model` with `drafter` ("none": standard) and `engine`'s draft settings (the
        pair's, or as an answer asked for them: event_stream.py); each choice's drafter is built once."""
        key = _key(model, drafter, engine)
        async with self._lock:
            if key not in self._drafters:  # build_decoder answers Ollama's own 404 for an unknown model
                built = await build_decoder(engine, self.target, model, drafter, self.draft, self.memory)
                self._drafters[key] = built.drafter
        return SpeculativeDecoder(self.target, model, self._drafters[key], engine, self.memory)

    def answered(self, job: Speculation, client: str, endpoint: str, stats: AnswerStats) -> None:
        """A speculated answer is complete: counted in the metrics, and its keep_alive passed on."""
        self.metrics.observe_answer(client, endpoint, stats, tools=job.tools)
        if job.keep_alive is not None:
            asyncio.get_running_loop().create_task(self.keep_alive(job.model, job.keep_alive, job.request.options))

    async def keep_alive(self, model: str, keep_alive: Any, options: dict[str, Any]) -> None:
        """The model's residency is upstream's: the request is passed on, with the answer's options
        (another num_ctx would make Ollama reload the model)."""
        try:
            await self.upstream.post("/api/generate", json={"model": model, "keep_alive": keep_alive,
                                                            "options": options})
        except httpx.HTTPError:
            pass  # residency is advice to upstream; the answer is already complete

    async def aclose(self) -> None:
        await self.upstream.aclose()
        await self.target.aclose()
        if self.draft is not self.target:
            await self.draft.aclose()


def _key(model: str, drafter: str, engine: EngineConfig) -> tuple[str, str, float, int, int]:
    return model, drafter, engine.p_min, engine.draft_top_k, engine.n_min


def _forwarded(answer_plan: Plan) -> Forward | None:
    """An answer upstream gives exactly as the engine would, faster: any answer the plan makes standard,
    and a seeded sampled one (which sample a seed draws depends on how the answer is cut into rounds:
    only upstream's standard generation repeats it)."""
    if answer_plan.code is not None and answer_plan.reason is not None:
        return Forward(answer_plan.code, answer_plan.reason)
    if answer_plan.sampling.seed is not None and not answer_plan.sampling.greedy:
        return Forward("option:seed", SEEDED_REASON)
    return None


async def decide(state: ProxyState, body: Any, chat: bool, client: str, endpoint: str) -> Forward | Refused | Started:
    """Speculate (the answer, started), pass on (the reason), or refuse (upstream's status)."""
    job = plan(body, chat, state.config.pairs, state.config.k)
    if isinstance(job, Forward):
        return replace(job, tools=carries_tools(body))
    try:
        decoder, answer_plan = await state.planned(job.model, job.request)
        if passed := _forwarded(answer_plan):
            return replace(passed, tools=job.tools)
        stream = answers.events(decoder, job.request, answer_plan)
        first = await anext(stream)
    except SpecError as error:
        cause = error.cause if isinstance(error, GenerationError) else error
        if isinstance(cause, ContextFull):  # the engine never cuts a context; upstream truncates it
            return Forward("context", CONTEXT_REASON, job.tools)
        return Refused(error.status or 500, error.message)

    async def replay():
        yield first
        async for event in stream:
            yield event

    return Started(job, answers.messages(job.model, chat, replay(),
                                         lambda stats: state.answered(job, client, endpoint, stats)))
