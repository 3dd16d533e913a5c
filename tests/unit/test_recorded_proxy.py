"""The proxy and the engine's plan fed the bodies a real Ollama 0.32.15 answered (tests/data/ollama-
recorded/, replayed by tests/support/recorded.py, a stand-in named as such): what they decide from that
server's version, models, Modelfile parameters and refusals, and what a client gets back.

The proxy runs in-process (its ASGI app through httpx); upstream is the replay server on 127.0.0.1.
"""

from __future__ import annotations

import json
import re
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
CODER = "qwen2.5-coder:1.5b"  # the model of the tool exchanges, 22-36


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


def proxy_client(upstream: str) -> httpx.AsyncClient:
    """A client of the proxy (in process) in front of `upstream`, speculating CODER with the suffix drafter."""
    app = create_proxy(ProxyConfig(upstream=upstream, pairs={CODER: "suffix"}, engine=EngineConfig()))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy", timeout=60)


def read_by_a_client(path: str, body: bytes) -> list[tuple[str, list]]:
    """What a client reads of an answer, message by message: (content, tool calls)."""
    if path.startswith("/v1/"):
        events = [json.loads(line[6:]) for line in body.decode().splitlines() if line.startswith("data: {")]
        parts = [choice.get("delta") or choice.get("message") or {}
                 for event in (events or [json.loads(body)]) for choice in event["choices"]]
    else:
        parts = [json.loads(line)["message"] for line in body.splitlines() if line.strip()]
    return [(part.get("content") or "", part.get("tool_calls") or []) for part in parts]


@pytest.mark.parametrize("name", ["22-chat-tools", "23-chat-tools-stream", "24-chat-tools-result",
                                  "25-chat-tools-write", "27-v1-chat-tools", "28-v1-chat-tools-stream"])
async def test_a_tool_chat_gets_ollamas_own_content_and_calls_through_the_proxy(ollama, name: str) -> None:
    """Recordings 22-28 through the proxy. The recorded qwen2.5-coder:1.5b (03's /api/show: created FROM
    its GGUF, a Jinja template) is one whose calls Ollama lets llama-server parse, which the engine's port
    of Ollama's parser would not repeat (tool_calls.builtin_parser_reason): the chat goes upstream
    unchanged, counted with its reason, and the client reads Ollama's own content and calls (its bare-
    JSON call as content, no tool_calls), byte for byte. (The engine's parse of a model Ollama parses
    with its own parser: tests/unit/test_tool_calls.py on these recordings, and
    tests/test_tool_speculation.py live.)"""
    recorded = load(name)
    async with proxy_client(ollama.url) as client:
        response = await client.post(recorded.path, content=json.dumps(recorded.request))
        metrics = (await client.get("/metrics")).text
        recent = (await client.get("/api/proxy/recent")).json()["requests"]
    assert response.status_code == recorded.status == 200
    assert read_by_a_client(recorded.path, response.content) == read_by_a_client(recorded.path, recorded.body)
    assert response.content == recorded.body
    assert ollama.bodies(recorded.path) == [recorded.request]  # the client's own request, nothing added
    assert f'spec_proxy_tool_requests_total{{endpoint="{recorded.path}",mode="forwarded"}} 1' in metrics
    assert f'spec_proxy_forwarded_total{{endpoint="{recorded.path}",reason="tools"}} 1' in metrics
    assert re.search("llama-server .* upstream answers this chat with tools itself", recent[0]["reason"]), recent


async def test_the_engine_renders_a_tool_chat_with_its_tools_as_ollama_renders_it(ollama) -> None:
    """Recorded 26: Ollama's `_debug_render_only` of 24 (a call and its result in the history) puts the
    tools into the prompt. The engine asks for the prompt it speculates on with the tools and the
    history as the client sent them, and gets that prompt."""
    asked, rendered = load("24-chat-tools-result").request, load("26-chat-tools-render-only").json()
    assert asked is not None
    target = OllamaClient(ollama.url)
    try:
        prompt = await target.render_chat(CODER, asked["messages"], {}, tools=asked["tools"])
    finally:
        await target.aclose()
    assert prompt == rendered["_debug_info"]["rendered_template"]
    assert "<tools>" in prompt and '"name": "get_weather"' in prompt
    (sent,) = ollama.bodies("/api/chat")
    assert (sent["messages"], sent["tools"], sent["_debug_render_only"]) == (asked["messages"], asked["tools"], True)
