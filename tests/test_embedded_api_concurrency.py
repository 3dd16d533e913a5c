"""The embedded server's Ollama API on real models under concurrency: a client that leaves stops its
generation, concurrent and nested (validator) requests answer as they would alone, and
/speculative/burst answers as its requests would one by one.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time

import httpx
import ollama
import pytest

from config import get_settings
from tests.support.embedded_api import CHATML_CONTEXT, CODE_CONTEXT, COUNTING, GREEDY, greedy, greedy_pieces, http
from tests.support.models import SMALL, TARGET

# -- cancellation and concurrency ------------------------------------------------------------------


async def eval_speed(client: ollama.AsyncClient) -> float:
    """Tokens per second of greedy counting at a short context; decoding only slows as it grows."""
    probe = await greedy(client, COUNTING, 64)
    assert probe.eval_count == 64
    return probe.eval_count / (probe.eval_duration / 1e9)


PROBE_TOKENS = 150  # each probe's length: past the test's limit of 100 tokens of waiting


async def queue_wait_in_tokens(client: ollama.AsyncClient) -> float:
    """How long requests, one for each of the model's slots (OLLAMA_NUM_PARALLEL) at once, waited
    before the model took them up, counted in their own time per token (the longest wait). A
    generation that went on after its client left holds a slot, so one of them waits for a slot to
    free: until that generation ends or another probe does, PROBE_TOKENS at least, however busy the
    machine is (with probes of 8 tokens it waited 8 either way, and the tests could not fail)."""

    async def short() -> float:
        started = time.perf_counter()
        answer = await greedy(client, "1, 2, 3, 4,", PROBE_TOKENS)
        wall_ns = (time.perf_counter() - started) * 1e9
        assert answer.eval_count == PROBE_TOKENS
        return (wall_ns - answer.total_duration) / (answer.eval_duration / answer.eval_count)

    return max(await asyncio.gather(*(short() for _ in range(get_settings().num_parallel))))


async def test_closing_a_stream_stops_the_generation(client, server_url):
    num_predict = 3000
    assert num_predict / await eval_speed(client) > 10, "the long answer should take many seconds"
    options = {**GREEDY, "num_predict": num_predict}
    body = {"model": SMALL, "prompt": COUNTING, "raw": True, "stream": True, "options": options}
    async with http(server_url) as h, h.stream("POST", "/api/generate", json=body) as response:
        lines = 0
        async for line in response.aiter_lines():
            assert not json.loads(line)["done"]
            lines += 1
            if lines == 3:
                break
    assert await queue_wait_in_tokens(client) < 100  # about 3000 had the generation gone on


async def test_a_non_streaming_request_stops_when_its_client_leaves(client, server_url):
    """Ollama cancels a request whose client disconnects, streaming or not; a client that times out
    must not leave the model busy for the rest of a long answer."""
    options = {**GREEDY, "num_predict": 400}
    body = {"model": SMALL, "prompt": COUNTING, "raw": True, "stream": False, "options": options}
    async with httpx.AsyncClient(base_url=server_url, timeout=0.5) as h:
        with pytest.raises(httpx.TimeoutException):
            await h.post("/api/generate", json=body)
    assert await queue_wait_in_tokens(client) < 100  # about 300 had the generation gone on


async def test_concurrent_requests_answer_as_they_would_alone(client):
    prompts = ["def add(a, b):", "The weather today is", "import numpy as np\n", "Once upon a time"]

    async def ask(prompt: str) -> str:
        return (await greedy(client, prompt, 16)).response

    together = await asyncio.gather(*(ask(prompt) for prompt in prompts))
    alone = [await ask(prompt) for prompt in prompts]
    assert together == alone
    assert len(set(alone)) == len(prompts)


async def test_a_second_client_gets_its_first_token_while_a_long_answer_streams(client, server_url):
    """Answers in progress take turns a token at a time: a second client waits for its own prompt's
    evaluation and a token or two of the first answer, not for the whole of it. (The 1.5b model: its
    tokens take long enough that HTTP's few milliseconds do not count.)"""
    body = {"model": TARGET, "prompt": COUNTING, "raw": True, "stream": True, "options": {**GREEDY, "num_predict": 256}}
    second = "<|im_start|>user\nName three rivers in Europe.<|im_end|>\n<|im_start|>assistant\n"
    async with http(server_url) as h, h.stream("POST", "/api/generate", json=body) as response:
        lines = response.aiter_lines()
        arrivals = []
        for _ in range(12):
            await anext(lines)
            arrivals.append(time.perf_counter())
        token_time = statistics.median(b - a for a, b in zip(arrivals[2:], arrivals[3:]))
        asked = time.perf_counter()
        stream = await client.generate(model=TARGET, prompt=second, raw=True, stream=True,
                                       options={**GREEDY, "num_predict": 8})
        first, final = None, None
        async for chunk in stream:
            first = first or time.perf_counter()
            final = chunk
        after = [json.loads(await anext(lines)) for _ in range(5)]
    assert not any(chunk["done"] for chunk in after)  # the first answer goes on
    waited = first - asked
    allowed = final.prompt_eval_duration / 1e9 + 3 * token_time
    print(f"second client's first token after {waited * 1e3:.0f} ms; its prompt took "
          f"{final.prompt_eval_duration / 1e6:.0f} ms, a token of the first answer {token_time * 1e3:.0f} ms")
    assert waited <= allowed, f"waited {waited * 1e3:.0f} ms, allowed {allowed * 1e3:.0f} ms"


# -- bursts: the validator's nested requests -------------------------------------------------------


@pytest.mark.parametrize(
    "model, context",
    [
        pytest.param(SMALL, CODE_CONTEXT, id="smollm2-code"),
        pytest.param(SMALL, CHATML_CONTEXT, id="smollm2-chatml"),
        pytest.param(TARGET, CHATML_CONTEXT, id="qwen1.5b-chatml"),
    ],
)
async def test_nested_validator_requests_answer_as_they_would_alone(client, model, context):
    """The validator's burst: prompts C, C+d1, ..., C+d1..d4 at once, one token each. The server may
    answer them from one evaluation, but every answer (and its prompt tokens) must be what the same
    request gets alone."""
    pieces = await greedy_pieces(client, model, context, 4)
    prompts = [context + "".join(pieces[:i]) for i in range(len(pieces) + 1)]

    async def ask(prompt: str):
        return await greedy(client, prompt, 1, model=model)

    together = await asyncio.gather(*(ask(prompt) for prompt in prompts))
    alone = [await ask(prompt) for prompt in prompts]
    assert [r.response for r in together] == [r.response for r in alone]
    assert [r.response for r in together[:-1]] == pieces  # greedy answers follow the greedy path
    counts = [r.prompt_eval_count for r in together]
    assert counts == [r.prompt_eval_count for r in alone]
    assert counts == list(range(counts[0], counts[0] + len(prompts)))  # one more token each


@pytest.mark.parametrize("model, context", [pytest.param(SMALL, CODE_CONTEXT, id="smollm2-code"),
                                            pytest.param(TARGET, CHATML_CONTEXT, id="qwen1.5b-chatml")])
async def test_a_burst_in_one_request_answers_as_its_requests_would_alone(server_url, client, model, context):
    """POST /speculative/burst (what the engine sends the embedded server instead of K+1 requests):
    each answer is, field for field, what /api/generate gives the same body alone; timings aside."""
    pieces = await greedy_pieces(client, model, context, 4)
    bodies = [{"model": model, "prompt": context + "".join(pieces[:i]), "raw": True, "stream": False,
               "logprobs": True, "top_logprobs": 3, "options": {**GREEDY, "num_predict": 1}} for i in range(5)]
    timing = {"created_at", "total_duration", "load_duration", "prompt_eval_duration", "eval_duration"}
    async with httpx.AsyncClient(base_url=server_url, timeout=120) as http:
        assert (await http.get("/api/version")).json()["burst_endpoint"] is True
        burst = await http.post("/speculative/burst", json={"requests": bodies})
        assert burst.status_code == 200, burst.text
        alone = [(await http.post("/api/generate", json=body)).json() for body in bodies]
    together = burst.json()["responses"]
    assert [{k: v for k, v in a.items() if k not in timing} for a in together] == \
           [{k: v for k, v in a.items() if k not in timing} for a in alone]
    assert [a["response"] for a in together[:-1]] == pieces
    assert len({a["prompt_eval_duration"] for a in together}) == 1  # one evaluation for the whole burst


@pytest.mark.parametrize("change, message", [
    ({"stream": True}, "num_predict 1"),
    ({"options": {"num_predict": 5}}, "num_predict 1"),
    ({"raw": False}, "num_predict 1"),
    ({"model": TARGET}, "same model"),
    ({"format": "json"}, "format"),
    ({"images": ["aGk="]}, "images"),
    ({"options": {"num_predict": 1, "num_ctx": 2048}}, "same num_ctx"),
])
async def test_a_burst_refuses_what_it_cannot_answer_exactly(server_url, change, message):
    body = {"model": SMALL, "prompt": "def f(x):", "raw": True, "stream": False, "options": {"num_predict": 1}}
    async with httpx.AsyncClient(base_url=server_url, timeout=120) as http:
        refused = await http.post("/speculative/burst", json={"requests": [body, {**body, **change}]})
        assert refused.status_code == 400 and message in refused.json()["error"], refused.text
        assert (await http.post("/speculative/burst", json={"requests": [body, body]})).status_code == 200
