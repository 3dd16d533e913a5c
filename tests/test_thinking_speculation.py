"""A thinking model through the proxy and the engine: `thinking` and the content exactly as upstream
splits them, with `think` true, false and absent; with thinking off, the answer is speculated.

Upstream is an embedded server of its own with the stand-in thinking model (tests/support/
thinking_model.py: the bundled Qwen 0.5B with a Qwen3-style template, named as a stand-in).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import ollama
import pytest

from tests.support.models import DRAFT
from tests.support.own_server import own_server
from tests.support.proxy import running_proxy
from tests.support.thinking_model import register, write_gguf
from utils.engine.answer import collect
from utils.engine.client import OllamaClient
from utils.engine.config import EngineConfig
from utils.engine.decoder import build_decoder
from utils.engine.request import GenerationRequest

QUESTION = [{"role": "user", "content": "What is 3 + 5?"}]
OPTIONS = {"temperature": 0, "num_predict": 80}


@pytest.fixture(scope="module")
def thinker(tmp_path_factory) -> Iterator[tuple[str, str]]:
    folder = tmp_path_factory.mktemp("thinking-speculation")
    with own_server(folder, (DRAFT,)) as url:
        yield url, register(url, write_gguf(folder))


@pytest.fixture(scope="module")
def proxied(thinker) -> Iterator[str]:
    url, name = thinker
    with running_proxy(url, "--pair", f"{name}=lookup", "--k", "3") as proxy:
        yield proxy


def chat(url: str, name: str, **fields) -> dict:
    response = httpx.post(f"{url}/api/chat", json={"model": name, "messages": QUESTION, "stream": False,
                                                   "options": OPTIONS, **fields}, timeout=600)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("think", [True, None, False], ids=["think-true", "think-absent", "think-false"])
def test_thinking_and_content_are_upstreams_own(thinker, proxied, think):
    url, name = thinker
    fields = {} if think is None else {"think": think}
    direct, through = chat(url, name, **fields), chat(proxied, name, **fields)
    assert through["message"].get("content") == direct["message"].get("content")
    assert through["message"].get("thinking") == direct["message"].get("thinking")
    if think is False:
        assert not direct["message"].get("thinking")
        assert through["speculative"]["method"] == "greedy"  # thinking off: speculated
    else:
        assert direct["message"]["thinking"] and direct["message"]["content"]  # the stand-in does both
        assert "speculative" not in through  # upstream's own answer, passed on
        metrics = httpx.get(f"{proxied}/metrics").text
        assert 'reason="thinking"' in metrics


def test_streamed_thinking_through_the_proxy_joins_to_upstreams(thinker, proxied):
    url, name = thinker
    direct = chat(url, name)
    parts = list(ollama.Client(host=proxied).chat(model=name, messages=QUESTION, options=OPTIONS, stream=True))
    assert "".join(p.message.thinking or "" for p in parts) == direct["message"]["thinking"]
    assert "".join(p.message.content or "" for p in parts) == direct["message"]["content"]


async def test_the_engine_reports_thinking_apart_from_the_answer(thinker):
    url, name = thinker
    direct = chat(url, name)
    target = OllamaClient(url)
    try:
        decoder = await build_decoder(EngineConfig(), target, name, "lookup")
        thinking = await collect(decoder, GenerationRequest(messages=QUESTION, options={"temperature": 0},
                                                            max_tokens=80))
        speculated = await collect(decoder, GenerationRequest(messages=QUESTION, options={"temperature": 0},
                                                              max_tokens=80, think=False))
    finally:
        await target.aclose()
    assert (thinking["thinking"], thinking["text"]) == (direct["message"]["thinking"], direct["message"]["content"])
    reasons = [fallback["reason"] for fallback in thinking["stats"]["fallbacks"]]
    assert reasons and "thinks" in reasons[0]  # generated standard, and it says why
    no_thinking = chat(url, name, think=False)
    assert speculated["thinking"] == "" and speculated["text"] == no_thinking["message"]["content"]
    assert speculated["stats"]["method"] == "greedy" and not speculated["stats"]["fallbacks"]
