"""The embedded server's in-process target (what `cli.py serve` speculates on), loaded in this process:
what it answers once an answer or a model (through the server's own routes, in process), and its
failures, which must be the same `ServerError` kinds the engine gets over HTTP."""

from __future__ import annotations

import pytest

from tests.support.models import SMALL
from utils.bench.in_process import LocalBench
from utils.engine.client import OllamaClient
from utils.engine.target import ContextFull, Drain, ModelNotFound


@pytest.fixture
async def local():
    bench = await LocalBench.start(SMALL, SMALL)
    try:
        yield bench.local
    finally:
        await bench.aclose()


async def test_it_answers_as_the_server_does_over_http(local, server_url):
    http = OllamaClient(server_url)
    try:
        assert await local.models() == await http.models()
        shown = await local.show(SMALL, verbose=True)
        assert shown["model_info"]["tokenizer.ggml.tokens"] == (await http.show(SMALL, verbose=True))[
            "model_info"]["tokenizer.ggml.tokens"]
        messages = [{"role": "user", "content": "Say hi"}]
        assert await local.render_chat(SMALL, messages, {}) == await http.render_chat(SMALL, messages, {})
        body = {"model": SMALL, "messages": messages, "options": {"temperature": 0, "num_predict": 8}}
        here = [m async for m in local.stream_answer(True, body)]
        there = [m async for m in http.stream_answer(True, body)]
        assert "".join(m["message"]["content"] for m in here) == "".join(m["message"]["content"] for m in there)
        assert here[-1]["done"] and here[-1]["eval_count"] == there[-1]["eval_count"]
        prompt = await local.render_chat(SMALL, messages, {})
        options = {"temperature": 0, "num_predict": 8}
        raw_here = [c async for c in local.stream_raw(SMALL, prompt, options)]
        raw_there = [c async for c in http.stream_raw(SMALL, prompt, options)]
        assert "".join(c.text for c in raw_here) == "".join(c.text for c in raw_there)
        assert raw_here[-1].done_reason == raw_there[-1].done_reason
        steps = await local.next_tokens(SMALL, [prompt, prompt + raw_here[0].text], [{"temperature": 0}] * 2)
        assert [s.token.text for s in steps] == [raw_here[0].text, raw_here[1].text]
    finally:
        await http.aclose()


async def test_a_drained_stream_ends_after_the_token_in_flight_without_ending_the_answer(local):
    prompt = await local.render_chat(SMALL, [{"role": "user", "content": "Count from 1 to 30."}], {})
    whole = [c async for c in local.stream_raw(SMALL, prompt, {"temperature": 0, "num_predict": 40})]
    drain, chunks = Drain(), []
    async for chunk in local.stream_raw(SMALL, prompt, {"temperature": 0, "num_predict": 40}, drain=drain):
        chunks.append(chunk)
        if len(chunks) == 3:
            drain.requested = True
    assert 3 <= len(chunks) <= 4  # the token the worker was computing, at most, and no closing chunk
    assert all(c.done_reason is None for c in chunks)
    assert [c.text for c in chunks] == [c.text for c in whole[: len(chunks)]]  # the same tokens, in order


async def test_failures_are_the_engines_error_kinds(local):
    with pytest.raises(ModelNotFound):
        await local.show("no-such-model:1b")
    with pytest.raises(ContextFull):
        await local.next_tokens(SMALL, ["x " * 3000], [{"temperature": 0, "num_ctx": 2048}])
