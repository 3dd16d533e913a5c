"""The embedded server's in-process target (what `cli.py serve` speculates on), loaded in this process:
what it answers once an answer or a model (through the server's own routes, in process), and its
failures, which must be the same `ServerError` kinds the engine gets over HTTP."""

from __future__ import annotations

import json
import os

import pytest

from config import get_settings
from tests.support.models import SMALL
from utils.engine.client import OllamaClient
from utils.engine.target import AnswerFormat, ContextFull, Drain, ModelNotFound


@pytest.fixture
async def local():
    """The embedded server's app in this process, no HTTP, as `cli.py serve` builds its target."""
    from utils.embedded.server import load_app

    load_app()  # llama.cpp's libraries first, before the runtime is imported
    from utils.embedded.http.target import in_process_target
    from utils.embedded.store.models import ModelStore

    settings = get_settings()
    async with in_process_target(ModelStore(settings.models_dir, settings.source_dirs), threads=os.cpu_count() or 2,
                                 gpu_layers=settings.gpu_layers) as target:
        yield target


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
        # The engine's own time comes with each answer, as Ollama's durations do over HTTP (bench-overhead
        # holds wall time to it); the burst's two jobs were evaluated together: one prompt evaluation.
        assert raw_here[-1].engine_s > 0 and raw_there[-1].engine_s > 0
        assert all(s.engine_s > 0 for s in steps) and steps[0].prompt_eval_s == steps[1].prompt_eval_s
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


async def test_a_format_resumes_mid_answer_as_if_the_answer_had_run_on(local):
    """`format` speculated in process (AnswerFormat): after any part of the answer, a burst's tokens
    and a resumed stream are those of the answer generated under the grammar from its start, and a
    draft that leaves the schema is verified without harm (its rows are never read)."""
    schema = {"type": "object", "required": ["name", "age"], "additionalProperties": False,
              "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "maximum": 9}}}
    prompt = await local.render_chat(SMALL, [{"role": "user", "content": "Tom is a cat of 3. Describe him."}], {})
    options, grammar = {"temperature": 0, "num_predict": 60}, AnswerFormat(schema, len(prompt))
    whole = [c async for c in local.stream_raw(SMALL, prompt, options, format=grammar)]
    pieces = [c.text for c in whole if c.tokens]
    assert whole[-1].done_reason == "stop" and json.loads("".join(pieces))["age"] <= 9
    for at in range(0, len(pieces) - 3, 3):
        answer = prompt + "".join(pieces[:at])
        burst = [answer + "".join(pieces[at:at + i]) for i in range(4)]
        steps = await local.next_tokens(SMALL, burst, [{"temperature": 0}] * 4, format=grammar)
        assert [s.token.text for s in steps] == pieces[at:at + 4]
        rest = [c.text async for c in local.stream_raw(SMALL, answer, options, format=grammar)]
        assert "".join(rest) == "".join(pieces[at:])
    wrong = await local.next_tokens(SMALL, [prompt, prompt + "Tom", prompt + "Tom is"], [{"temperature": 0}] * 3,
                                    format=grammar)
    assert wrong[0].token.text == pieces[0]  # "Tom" is no JSON: the target's own token differs from it
