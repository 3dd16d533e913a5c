"""A thinking model speculated through its thinking, in `cli.py serve` and through the proxy: `thinking`
and the content exactly as the same server gives them with speculation off, with `think` true, false,
absent and a level, streamed and not; sampled thinking answers keep the target's distribution.

The server is an embedded one of its own with the stand-in thinking model (tests/support/
thinking_model.py: the bundled Qwen 0.5B with a Qwen3-style template, named as a stand-in). Its
reasoning begins as its template's example exchange does ("The user asks for the sum of ..."), so
prompt lookup drafts inside the reasoning from the first token.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import httpx
import ollama
import openai
import pytest

from tests.support.distribution import assert_fits, sampled_first_tokens
from tests.support.models import DRAFT
from tests.support.own_server import own_server
from tests.support.proxy import running_proxy
from tests.support.thinking_model import register, write_gguf
from utils.engine.answer import collect
from utils.engine.client import OllamaClient
from utils.engine.config import EngineConfig
from utils.engine.decoder import build_decoder
from utils.engine.request import GenerationRequest
from utils.sampling import SamplingOptions, text_distribution

QUESTION = [{"role": "user", "content": "What is 7 + 6?"}]
OPTIONS = {"temperature": 0, "num_predict": 60}
OFF = {"X-Speculation": "off"}
THINKS = [None, True, False, "high"]


@pytest.fixture(scope="module")
def thinker(tmp_path_factory) -> Iterator[tuple[str, str]]:
    folder = tmp_path_factory.mktemp("thinking-speculation")
    with own_server(folder, (DRAFT,), speculation=True,  # `cli.py serve`: speculates in process
                    args=("--pair", "stand-in-thinker:latest=lookup", "--k", "3")) as url:
        yield url, register(url, write_gguf(folder))


@pytest.fixture(scope="module")
def proxied(thinker) -> Iterator[str]:
    url, name = thinker
    with running_proxy(url, "--pair", f"{name}=lookup", "--k", "3") as proxy:
        yield proxy


def answers(url: str, name: str, think, headers: dict[str, str] | None = None) -> list[tuple]:
    """(thinking, content, done reason) whole and streamed, as ollama-python gets them; and whether
    each was speculated (the `speculative` summary of the engine's answer)."""
    client = ollama.Client(host=url, headers=headers or {}, timeout=600)
    fields = {} if think is None else {"think": think}
    whole = client.chat(model=name, messages=QUESTION, options=OPTIONS, **fields)
    parts = list(client.chat(model=name, messages=QUESTION, options=OPTIONS, stream=True, **fields))
    return [(whole.message.thinking or "", whole.message.content, whole.done_reason),
            ("".join(p.message.thinking or "" for p in parts), "".join(p.message.content for p in parts),
             parts[-1].done_reason)]


def speculated(url: str, name: str, think) -> dict:
    fields = {} if think is None else {"think": think}
    body = {"model": name, "messages": QUESTION, "stream": False, "options": OPTIONS, **fields}
    reply = httpx.post(f"{url}/api/chat", json=body, timeout=600).json()
    return reply["speculative"]


@pytest.mark.parametrize("think", THINKS, ids=["think-absent", "think-true", "think-false", "think-high"])
def test_serve_speculates_thinking_and_answers_as_without(thinker, think):
    url, name = thinker
    standard, fast = answers(url, name, think, OFF), answers(url, name, think)
    assert fast == standard
    if think is not False:
        assert standard[0][0] and standard[0][1]  # the stand-in reasons, then answers
    summary = speculated(url, name, think)
    assert summary["method"] == "greedy" and not summary["fallbacks"], summary
    assert summary["draft_tokens"] > 0 or think is False, summary  # drafted inside the reasoning


@pytest.mark.parametrize("think", THINKS, ids=["think-absent", "think-true", "think-false", "think-high"])
def test_the_proxy_speculates_thinking_and_answers_as_upstream(thinker, proxied, think):
    url, name = thinker
    assert answers(proxied, name, think) == answers(url, name, think, OFF)
    summary = speculated(proxied, name, think)
    assert summary["method"] == "greedy" and not summary["fallbacks"], summary
    assert summary["draft_tokens"] > 0 or think is False, summary


def test_no_thinking_answer_is_forwarded_and_openai_gets_the_reasoning(thinker, proxied):
    url, name = thinker
    sdk = [openai.OpenAI(base_url=f"{base}/v1", api_key="unused", default_headers=headers, max_retries=0)
           for base, headers in ((proxied, {}), (url, OFF))]
    ask = {"model": name, "messages": QUESTION, "temperature": 0, "max_tokens": 60}
    whole = [client.chat.completions.create(**ask).choices[0].message for client in sdk]
    assert [(m.content, m.model_extra.get("reasoning")) for m in whole][0] == \
        [(m.content, m.model_extra.get("reasoning")) for m in whole][1]
    assert whole[0].model_extra.get("reasoning")  # Ollama's field for the thinking
    chunks = [c for c in sdk[0].chat.completions.create(**ask, stream=True) if c.choices]
    assert "".join((c.choices[0].delta.model_extra or {}).get("reasoning") or "" for c in chunks) == \
        whole[1].model_extra["reasoning"]
    metrics = httpx.get(f"{proxied}/metrics", timeout=30).text
    assert 'reason="thinking"' not in metrics  # the stand-in's format is known: nothing forwarded for it


async def test_the_engine_counts_thinking_tokens_apart_from_the_answer(thinker):
    url, name = thinker
    direct = httpx.post(f"{url}/api/chat", headers=OFF, timeout=600, json={
        "model": name, "messages": QUESTION, "stream": False, "options": OPTIONS}).json()
    target = OllamaClient(url)
    try:
        decoder = await build_decoder(EngineConfig(), target, name, "lookup")
        answer = await collect(decoder, GenerationRequest(messages=QUESTION, options={"temperature": 0},
                                                          max_tokens=60, k=3))
    finally:
        await target.aclose()
    assert (answer["thinking"], answer["text"]) == (direct["message"]["thinking"], direct["message"]["content"])
    stats = answer["stats"]
    assert stats["drafted_tokens"] > 0 and not stats["fallbacks"]
    # The reasoning is most of the answer; the answer ("7 + 6 = 13.") a few tokens after it.
    assert 0 < stats["output_tokens"] - stats["thinking_tokens"] < stats["thinking_tokens"], stats
    origins = {origin for _, origin in answer["thinking_pieces"]}
    assert "draft" in origins  # accepted draft text inside the reasoning, for the app to show


def test_sampled_thinking_keeps_the_target_distribution(thinker):
    """The reasoning's first token, sampled through speculation (prompt lookup drafts it from the
    template's example), is distributed as the target's own sampler draws it (chi-squared, p = 0.001)."""
    url, name = thinker
    options = SamplingOptions(temperature=2.5, top_k=5, top_p=1.0)  # hot: the reasoning's "The" is 99% greedy
    prompt = httpx.post(f"{url}/api/chat", timeout=300, json={
        "model": name, "messages": QUESTION, "stream": False, "_debug_render_only": True}).json()
    probe = {"model": name, "prompt": prompt["_debug_info"]["rendered_template"], "raw": True, "stream": False,
             "think": False, "logprobs": True, "top_logprobs": 20, "options": {"temperature": 0, "num_predict": 1}}
    top = httpx.post(f"{url}/api/generate", json=probe, headers=OFF, timeout=300).json()["logprobs"][0]
    expected: Counter = Counter()  # over texts as the parser leaves them: whitespace after <think> is dropped
    for token, probability in text_distribution({t["token"]: t["logprob"] for t in top["top_logprobs"]},
                                                options).items():
        expected[token.lstrip()] += probability
    runs = 160
    body = {"model": name, "messages": QUESTION, "stream": False,
            "options": {"temperature": 2.5, "top_k": 5, "top_p": 1.0, "num_predict": 3}}
    seen, methods, drafts = sampled_first_tokens(
        url, "/api/chat", body, runs, expected,
        lambda reply: reply["message"].get("thinking") or reply["message"]["content"])
    assert methods == {"sample-match"}, methods
    assert drafts > 0, expected
    assert_fits(seen, expected, runs)
