"""The embedded server's Ollama API, through the official `ollama` client, on real models: listing,
generate and chat, options (errors and logprobs: test_embedded_api_errors.py; cancellation,
concurrency and bursts: test_embedded_api_concurrency.py).

Most tests use smollm2:135m because it answers in milliseconds on a CPU. Plain httpx appears only
where the client cannot express a request or hides a field (`_debug_render_only`, malformed JSON,
the `bytes` of a logprob, closing a stream half-way).

The tests share one server and so one loaded model per name: a test that loads a model with another
`num_ctx` puts the default context back before it ends.

"""

from __future__ import annotations

import json
import re

import ollama
import pytest

from config import get_settings
from tests.support.embedded_api import COUNTING, DEFAULT_NUM_CTX, GREEDY, collect, greedy, http, restore_default_context
from tests.support.models import SMALL, TARGET
from tests.support.recorded import load
from utils.embedded.store.models import ModelStore

# -- model listing ---------------------------------------------------------------------------------


async def test_version_is_the_ollama_whose_behaviour_the_server_follows(server_url):
    """The recorded Ollama's (0.32.15): clients gate features on it (`codex exec --oss` needs 0.13.4)."""
    async with http(server_url) as h:
        response = await h.get("/api/version")
    assert response.status_code == 200
    assert response.json()["version"] == json.loads(load("01-version").body)["version"]
    assert tuple(map(int, response.json()["version"].split("."))) >= (0, 13, 4)


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


# -- generate and chat -----------------------------------------------------------------------------


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


async def test_a_later_system_message_joins_the_top_system_prompt(server_url):
    """As Ollama renders a chat (template.go `collate`, then its qwen2.5-coder template's `.System`):
    every system message joined at the top, not a later one where it stands (Claude Code sends its
    "# Environment" block so; left in place, the model echoed it)."""
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello."}, {"role": "system", "content": "# Environment\nLinux"},
                {"role": "user", "content": "Which OS?"}, {"role": "user", "content": "One word."}]
    async with http(server_url) as h:
        body = {"model": "qwen2.5-coder:0.5b", "messages": messages, "_debug_render_only": True}
        rendered = (await h.post("/api/chat", json=body)).json()["_debug_info"]["rendered_template"]
    assert rendered == ("<|im_start|>system\nBe brief.\n\n# Environment\nLinux<|im_end|>\n"
                        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
                        "<|im_start|>user\nWhich OS?\n\nOne word.<|im_end|>\n<|im_start|>assistant\n")


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
    # Nothing generated, as a real Ollama answers it (tests/data/ollama-recorded/09, 10): an empty
    # response or message, done false, no statistics.
    empty = {"response": ""} if endpoint == "generate" else {"message": {"role": "", "content": ""}}
    assert {**response.json(), **empty} == response.json() and response.json()["done"] is False
    assert "eval_count" not in response.json()


# -- options ---------------------------------------------------------------------------------------


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


async def test_a_request_without_num_ctx_gets_the_default_context(client):
    """In Ollama a request without num_ctx runs with the default context, whatever the last request
    loaded; here the context of the last num_ctx request sticks, and this 400-token prompt fails."""
    try:
        await greedy(client, "Hello", 1, num_ctx=256)
        answer = await greedy(client, "hello " * 400, 1)
        assert answer.prompt_eval_count > 256
    finally:
        await restore_default_context(client)
