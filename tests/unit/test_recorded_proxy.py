"""The proxy and the engine's plan fed the bodies a real Ollama 0.32.15 answered (tests/data/ollama-
recorded/, replayed by tests/support/recorded.py, a stand-in named as such): what they decide from that
server's version, models, Modelfile parameters and refusals, and what a client gets back.

The proxy runs in-process (its ASGI app through httpx); upstream is the replay server on 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.support.recorded import RecordedOllama, load
from utils.engine.client import OllamaClient
from utils.engine.config import EngineConfig
from utils.engine.decoder import SpeculativeDecoder
from utils.engine.drafters.lookup import PromptLookupDrafter
from utils.engine.request import GenerationRequest
from utils.proxy.app import create_proxy
from utils.proxy.serving import ProxyConfig

QWEN = "qwen2.5-coder:0.5b"


@pytest.fixture
async def ollama() -> AsyncIterator[RecordedOllama]:
    with RecordedOllama() as replay:
        yield replay


async def test_the_engine_reads_a_modelfile_greedy_and_its_stop_from_a_real_show(ollama) -> None:
    """Recorded 18: `q05-greedy` has PARAMETER temperature 0 and stop "def ": a request with no options
    is greedy and stops there, as Ollama answered it (recorded 19, done_reason "stop")."""
    target = OllamaClient(ollama.url)
    try:
        decoder = SpeculativeDecoder(target, "q05-greedy", PromptLookupDrafter(set()), EngineConfig())
        plan = await decoder.plan(GenerationRequest(messages=[{"role": "user", "content": "hi"}], options={}))
    finally:
        await target.aclose()
    assert plan.sampling.greedy and plan.stops == ["def "]
    assert plan.method == "greedy"  # speculated: lookup, greedy, a server with logprobs
    assert load("19-chat-model-parameters-no-options").json()["done_reason"] == "stop"


async def test_rejection_sampling_is_not_used_on_a_server_that_does_not_declare_exact_logprobs(ollama) -> None:
    """Ollama 0.32.15's /api/version has only `version`: sampled answers are verified by sample-match,
    even with a drafter whose distribution is exact (llama.cpp's sampler order is not the logprobs')."""
    target = OllamaClient(ollama.url)
    drafter = PromptLookupDrafter(set())
    drafter.exact_distribution = True  # as a draft model with the target's tokenizer would be
    try:
        plan = await SpeculativeDecoder(target, QWEN, drafter, EngineConfig()).plan(
            GenerationRequest(prompt="x", raw=True, options={"temperature": 0.7, "top_k": 20}))
        assert not await target.exact_logprobs()
    finally:
        await target.aclose()
    assert plan.method == "sample-match"


async def test_think_on_a_model_without_thinking_gets_ollamas_own_refusal_through_the_proxy(ollama) -> None:
    """Recorded 17: `think: true` on qwen2.5-coder:0.5b is Ollama's 400. The proxy must not answer it
    with a speculated 200 (its raw requests say `think: false`): it passes the request on unchanged."""
    recorded = load("17-generate-raw-think-true")
    app = create_proxy(ProxyConfig(upstream=ollama.url, pairs={QWEN: "lookup"}, engine=EngineConfig()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
        response = await client.post("/api/generate", content=json.dumps(recorded.request))
        metrics = (await client.get("/metrics")).text
    assert response.status_code == 400 == recorded.status
    assert response.json() == recorded.json() == {"error": '"qwen2.5-coder:0.5b" does not support thinking'}
    assert ollama.bodies("/api/generate") == [recorded.request]  # the client's own bytes, nothing added
    assert 'reason="thinking"' in metrics
