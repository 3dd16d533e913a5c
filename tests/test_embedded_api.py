"""The embedded server's Ollama API, through the official `ollama` client, on real models.

Most tests use smollm2:135m because it answers in milliseconds on a CPU. Plain httpx appears only
where the client cannot express a request or hides a field (`_debug_render_only`, malformed JSON,
the `bytes` of a logprob, closing a stream half-way).

The tests share one server and so one loaded model per name: a test that loads a model with another
`num_ctx` puts the default context back before it ends.

"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import time

import httpx
import ollama
import pytest

from config import get_settings
from utils.embedded.models import ModelStore

SMALL = "smollm2:135m"
TARGET = "qwen2.5-coder:1.5b"
GREEDY = {"temperature": 0}
DEFAULT_NUM_CTX = 4096

# smollm2 keeps counting greedily for thousands of tokens (checked once: 3,946 tokens up to the full
# 4,096 context), so a request on this prompt ends by num_predict, a stop string or a disconnect.
COUNTING = ", ".join(str(i) for i in range(1, 41)) + ","
CODE_CONTEXT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
CHATML_CONTEXT = (
    "<|im_start|>system\nYou are a coding assistant.<|im_end|>\n"
    "<|im_start|>user\nWrite a Python function that checks whether a number is prime.<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def http(server_url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server_url, timeout=120.0)


async def collect(stream) -> tuple[str, list, object]:
    """The streamed text, the non-final chunks and the final chunk of a streaming generate/chat."""
    parts, chunks, final = [], [], None
    async for chunk in stream:
        if chunk.done:
            final = chunk
        else:
            chunks.append(chunk)
            message = getattr(chunk, "message", None)  # chat chunks carry a message, generate a response
            parts.append(message.content if message is not None else chunk.response)
    assert final is not None, "the stream ended without a final chunk"
    return "".join(parts), chunks, final


async def greedy(client: ollama.AsyncClient, prompt: str, num_predict: int, model: str = SMALL, **options):
    options = {**GREEDY, "num_predict": num_predict, **options}
    return await client.generate(model=model, prompt=prompt, raw=True, options=options)


async def restore_default_context(client: ollama.AsyncClient) -> None:
    await greedy(client, "Hello", 1, num_ctx=DEFAULT_NUM_CTX)


# -- model listing ----------------------------------------------------------------------------------


async def test_version(server_url):
    async with http(server_url) as h:
        response = await h.get("/api/version")
    assert response.status_code == 200
    assert re.fullmatch(r"\d+\.\d+\.\d+", response.json()["version"])


async def test_tags_lists_installed_models_with_their_file_sizes_and_digests(client):
    store = ModelStore(get_settings().models_dir)
    listed = {model.model: model for model in (await client.list()).models}
    assert {SMALL, TARGET, "qwen2.5-coder:0.5b"} <= set(listed)
    for name, model in listed.items():
        assert model.size == store.path(name).stat().st_size
        assert re.fullmatch(r"[0-9a-f]{64}", model.digest)
        assert model.details.format == "gguf"
    assert listed[SMALL].details.quantization_level == "Q4_1"
    assert listed[TARGET].details.parameter_size == "1.5B"


async def test_show_reports_details_model_info_and_template(client):
    shown = await client.show(SMALL)
    assert shown.details.format == "gguf"
    assert shown.details.quantization_level == "Q4_1"
    assert shown.modelinfo["general.architecture"] == "llama"
    assert shown.modelinfo["llama.context_length"] == 8192  # numbers stay numbers, as in Ollama
    assert shown.modelinfo["llama.vocab_size"] == 49152
    assert "<|im_start|>" in shown.template
    assert "completion" in shown.capabilities


async def test_ps_lists_a_loaded_model(client):
    await greedy(client, "Hello", 1)
    running = {model.model: model for model in (await client.ps()).models}
    assert SMALL in running
    installed = {model.model: model for model in (await client.list()).models}
    assert running[SMALL].size == installed[SMALL].size
    assert running[SMALL].context_length == DEFAULT_NUM_CTX
    from llama_cpp import llama_supports_gpu_offload

    # All layers on the GPU where llama.cpp has one (SPEC_GPU_LAYERS -1); none on a CPU-only build
    assert running[SMALL].size_vram == (running[SMALL].size if llama_supports_gpu_offload() else 0)


# -- generate and chat --------------------------------------------------------------------------------


async def test_generate_streaming_equals_non_streaming(client):
    options = {**GREEDY, "num_predict": 24}
    whole = await client.generate(model=SMALL, prompt="Name three colours.", options=options)
    text, chunks, final = await collect(
        await client.generate(model=SMALL, prompt="Name three colours.", options=options, stream=True)
    )
    assert whole.response and text == whole.response
    assert len(chunks) == final.eval_count == whole.eval_count  # one chunk per token
    assert final.done_reason == whole.done_reason
    assert final.response == ""


async def test_chat_streaming_equals_non_streaming(client):
    messages = [
        {"role": "user", "content": "Hi! What is your name?"},
        {"role": "assistant", "content": "I am SmolLM."},
        {"role": "user", "content": "What can you do?"},
    ]
    options = {**GREEDY, "num_predict": 24}
    whole = await client.chat(model=SMALL, messages=messages, options=options)
    text, chunks, final = await collect(
        await client.chat(model=SMALL, messages=messages, options=options, stream=True)
    )
    assert whole.message.role == "assistant"
    assert whole.message.content and text == whole.message.content
    assert len(chunks) == final.eval_count == whole.eval_count
    assert final.message.content == ""


async def test_done_fields_are_present_and_positive(client):
    options = {**GREEDY, "num_predict": 8}
    response = await client.generate(model=SMALL, prompt="Say hello.", options=options)
    assert response.done is True
    assert response.done_reason in ("stop", "length")
    assert response.load_duration is not None and response.load_duration >= 0  # 0 once loaded
    counters = ("total_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count", "eval_duration")
    for field in counters:
        assert getattr(response, field) > 0, field
    assert response.total_duration >= response.prompt_eval_duration + response.eval_duration


async def test_raw_mode_sends_the_prompt_without_the_template(client, server_url):
    prompt = "The capital of France is"
    raw = await greedy(client, prompt, 8)
    templated = await client.generate(model=SMALL, prompt=prompt, options={**GREEDY, "num_predict": 8})
    assert "Paris" in raw.response
    # The chat template adds a default system message and the ChatML markers around the prompt.
    assert raw.prompt_eval_count < 10 < templated.prompt_eval_count
    async with http(server_url) as h:
        body = {"model": SMALL, "prompt": prompt, "raw": True, "_debug_render_only": True}
        rendered = (await h.post("/api/generate", json=body)).json()["_debug_info"]["rendered_template"]
    assert rendered == prompt


async def test_system_replaces_the_default_system_message(client, server_url):
    async def render(**fields) -> str:
        async with http(server_url) as h:
            body = {"model": SMALL, "prompt": "Who are you?", "_debug_render_only": True, **fields}
            return (await h.post("/api/generate", json=body)).json()["_debug_info"]["rendered_template"]

    assert "SmolLM" in await render()
    with_system = await render(system="You are a pirate.")
    assert with_system.startswith("<|im_start|>system\nYou are a pirate.<|im_end|>\n")
    assert "SmolLM" not in with_system
    options = {**GREEDY, "num_predict": 8}
    answer = await client.generate(
        model=SMALL, prompt="Who are you?", system="You are a pirate.", options=options
    )
    assert answer.done and answer.eval_count > 0


@pytest.mark.parametrize("endpoint", ["generate", "chat"])
async def test_debug_render_only_returns_the_chatml_prompt(server_url, endpoint):
    question = "What is 2+2?"
    body = {"model": SMALL, "_debug_render_only": True}
    if endpoint == "generate":
        body["prompt"] = question
    else:
        body["messages"] = [{"role": "user", "content": question}]
    async with http(server_url) as h:
        response = await h.post(f"/api/{endpoint}", json=body)
    assert response.status_code == 200
    rendered = response.json()["_debug_info"]["rendered_template"]
    assert f"<|im_start|>user\n{question}<|im_end|>\n" in rendered
    assert rendered.endswith("<|im_start|>assistant\n")
    assert "response" not in response.json() and "eval_count" not in response.json()


# -- options ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_num_predict_ends_the_answer_with_done_reason_length(client, stream):
    request = dict(model=SMALL, prompt=COUNTING, raw=True, options={**GREEDY, "num_predict": 7})
    if stream:
        _, chunks, final = await collect(await client.generate(**request, stream=True))
        assert len(chunks) == 7
    else:
        final = await client.generate(**request)
    assert final.eval_count == 7
    assert final.done_reason == "length"


async def test_temperature_zero_is_deterministic(client):
    messages = [{"role": "user", "content": "Tell me a joke."}]
    options = {**GREEDY, "num_predict": 24}
    first = await client.chat(model=SMALL, messages=messages, options=options)
    second = await client.chat(model=SMALL, messages=messages, options=options)
    assert first.message.content == second.message.content


STORY = "Write the first sentence of a story about a dragon."


async def sampled(client: ollama.AsyncClient, **options) -> str:
    response = await client.generate(model=SMALL, prompt=STORY, options={"num_predict": 24, **options})
    return response.response


async def test_seed_reproduces_a_sampled_answer_and_different_seeds_differ(client):
    options = {"temperature": 0.9}
    assert await sampled(client, seed=42, **options) == await sampled(client, seed=42, **options)
    texts = {await sampled(client, seed=seed, **options) for seed in range(1, 6)}
    assert len(texts) >= 2


async def test_sampling_filters_that_keep_one_candidate_give_the_greedy_answer(client):
    """top_k, top_p and min_p are applied: each of these settings leaves only the most likely token,
    so even at a high temperature the answer is the greedy one."""
    greedy_text = await sampled(client, **GREEDY)
    hot = {"temperature": 1.5}
    seeds = (1, 2)
    unfiltered = {await sampled(client, seed=seed, **hot) for seed in seeds}
    assert unfiltered != {greedy_text}, "at temperature 1.5 sampling should leave the greedy path"
    for only_the_best in ({"top_k": 1}, {"top_p": 0.01}, {"min_p": 1.0}):
        for seed in seeds:
            assert await sampled(client, seed=seed, **hot, **only_the_best) == greedy_text, only_the_best


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "stop", [[" 45"], ["3, 4"], ["50", "44"]], ids=["one-token", "spans-tokens", "earliest"]
)
async def test_stop_strings_end_the_answer_before_the_stop(client, stop, stream):
    full = (await greedy(client, COUNTING, 40)).response
    assert full.startswith(" 41, 42, 43, 44, 45,")
    expected = full[: min(full.index(s) for s in stop)]
    options = {**GREEDY, "num_predict": 40, "stop": stop}
    request = dict(model=SMALL, prompt=COUNTING, raw=True, options=options)
    if stream:
        text, _, final = await collect(await client.generate(**request, stream=True))
    else:
        final = await client.generate(**request)
        text = final.response
    assert text == expected
    assert final.done_reason == "stop"


async def test_num_ctx_reloads_the_model_with_that_context(client):
    try:
        answer = await greedy(client, "Hello", 4, num_ctx=2048)
        assert answer.load_duration > 0
        running = {model.model: model for model in (await client.ps()).models}
        assert running[SMALL].context_length == 2048
    finally:
        await restore_default_context(client)
    running = {model.model: model for model in (await client.ps()).models}
    assert running[SMALL].context_length == DEFAULT_NUM_CTX


# -- logprobs ---------------------------------------------------------------------------------------


async def test_streamed_logprobs_have_ollamas_shape(server_url):
    body = {
        "model": SMALL, "prompt": CODE_CONTEXT, "raw": True, "stream": True,
        "logprobs": True, "top_logprobs": 5, "options": {**GREEDY, "num_predict": 12},
    }
    chunks = []
    async with http(server_url) as h, h.stream("POST", "/api/generate", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line:
                chunks.append(json.loads(line))
    assert chunks[-1]["done"] and len(chunks) == 13
    for chunk in chunks[:-1]:
        [entry] = chunk["logprobs"]
        assert isinstance(entry["token"], str)
        assert entry["logprob"] <= 0
        assert bytes(entry["bytes"]).decode("utf-8", errors="replace") == entry["token"]
        top = entry["top_logprobs"]
        assert len(top) == 5
        values = [candidate["logprob"] for candidate in top]
        assert values == sorted(values, reverse=True) and all(v <= 0 for v in values)
        assert sum(2.718281828 ** v for v in values) <= 1.0 + 1e-6
        # Greedy picks the most likely token.
        assert entry["logprob"] == pytest.approx(values[0], abs=1e-9)
        assert entry["token"] == top[0]["token"]
    assert "".join(chunk["response"] for chunk in chunks) == "".join(
        chunk["logprobs"][0]["token"] for chunk in chunks[:-1]
    )


async def test_non_streamed_logprobs_have_one_entry_per_token(client):
    response = await client.chat(
        model=SMALL, messages=[{"role": "user", "content": "Count to five."}],
        options={**GREEDY, "num_predict": 10}, logprobs=True, top_logprobs=3,
    )
    assert len(response.logprobs) == response.eval_count
    for entry in response.logprobs:
        assert len(entry.top_logprobs) == 3
        assert entry.logprob == pytest.approx(max(t.logprob for t in entry.top_logprobs), abs=1e-9)


# -- errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["generate", "chat", "show"])
async def test_unknown_model_is_404_not_found(client, endpoint):
    calls = {
        "generate": lambda: client.generate(model="nosuchmodel:1b", prompt="hi"),
        "chat": lambda: client.chat(model="nosuchmodel:1b", messages=[{"role": "user", "content": "x"}]),
        "show": lambda: client.show("nosuchmodel:1b"),
    }
    with pytest.raises(ollama.ResponseError) as caught:
        await calls[endpoint]()
    assert caught.value.status_code == 404
    assert "not found" in caught.value.error


async def test_top_logprobs_above_20_is_400(client):
    with pytest.raises(ollama.ResponseError) as caught:
        await client.generate(model=SMALL, prompt="hi", logprobs=True, top_logprobs=21)
    assert caught.value.status_code == 400


async def test_raw_mode_with_system_is_400(client):
    with pytest.raises(ollama.ResponseError) as caught:
        await client.generate(model=SMALL, prompt="hi", raw=True, system="You are terse.")
    assert caught.value.status_code == 400
    assert "raw mode does not support template, system, or context" in caught.value.error


@pytest.mark.parametrize("stream", [False, True])
async def test_a_prompt_longer_than_the_context_with_truncate_false_is_400_and_the_server_goes_on(
        client, server_url, stream):
    """Without `truncate: false` such a prompt is cut to fit (tests/test_long_chats.py)."""
    body = {"model": SMALL, "prompt": "hello " * 2000, "raw": True, "stream": stream, "truncate": False,
            "options": {"num_ctx": 256, "num_predict": 4}}
    try:
        async with http(server_url) as h:
            reply = await h.post("/api/generate", json=body)
        assert reply.status_code == 400
        assert "context length" in reply.json()["error"]
    finally:
        await restore_default_context(client)
    assert (await greedy(client, COUNTING, 4)).eval_count == 4


async def test_malformed_json_is_400_with_an_error_field(server_url):
    async with http(server_url) as h:
        truncated = b'{"model": "smollm2:135m", "prompt": '
        response = await h.post(
            "/api/generate", content=truncated, headers={"content-type": "application/json"}
        )
    assert response.status_code == 400
    assert isinstance(response.json()["error"], str) and response.json()["error"]


# -- cancellation and concurrency -------------------------------------------------------------------


async def eval_speed(client: ollama.AsyncClient) -> float:
    """Tokens per second of greedy counting at a short context; decoding only slows as it grows."""
    probe = await greedy(client, COUNTING, 64)
    assert probe.eval_count == 64
    return probe.eval_count / (probe.eval_duration / 1e9)


async def queue_wait_in_tokens(client: ollama.AsyncClient) -> float:
    """How long short requests, one for each of the model's slots (OLLAMA_NUM_PARALLEL) at once,
    waited before the model took them up, counted in their own time per token (the longest wait).
    A generation that went on after its client left holds a slot, so one of them waits for it to
    end: that many tokens, however busy the machine is."""

    async def short() -> float:
        started = time.perf_counter()
        answer = await greedy(client, "1, 2, 3, 4,", 8)
        wall_ns = (time.perf_counter() - started) * 1e9
        assert answer.eval_count == 8
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


async def greedy_pieces(client: ollama.AsyncClient, model: str, context: str, count: int) -> list[str]:
    """The model's own greedy continuation of `context`, one token per piece."""
    stream = await client.generate(
        model=model, prompt=context, raw=True, stream=True, logprobs=True,
        options={**GREEDY, "num_predict": count},
    )
    _, chunks, final = await collect(stream)
    assert final.eval_count == count
    return [chunk.response for chunk in chunks]


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


# -- below the HTTP layer ---------------------------------------------------------------------------


def test_tokens_after_a_stop_string_are_dropped():
    """The worker thread may emit tokens before it sees the cancellation a stop string sets; they are
    past the stop and must not reach the answer. Here they all arrive at once, as on a busy server."""
    from utils.embedded.text import TextAssembler

    assembler = TextAssembler(["."])
    pieces = [assembler.feed(piece) for piece in (b"one", b".", b" two", b" three")]
    assert "".join(pieces) + assembler.flush() == "one"
    assert assembler.stopped


async def test_a_request_without_num_ctx_gets_the_default_context(client):
    """In Ollama a request without num_ctx runs with the default context, whatever the last request
    loaded; here the context of the last num_ctx request sticks, and this 400-token prompt fails."""
    try:
        await greedy(client, "Hello", 1, num_ctx=256)
        answer = await greedy(client, "hello " * 400, 1)
        assert answer.prompt_eval_count > 256
    finally:
        await restore_default_context(client)
