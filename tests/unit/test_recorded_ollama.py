"""The engine's Ollama client (utils/engine/client.py) on what a real Ollama 0.32.15 answered.

The server here is a stand-in, named as such: tests/support/recorded.py replays the bodies, statuses
and content types recorded from a real Ollama 0.32.15 (tests/data/ollama-recorded/), because a real
Ollama cannot run in this suite. Its matching rule (which recording answers which request) is in its
docstring; it also keeps every request it got, so the tests check what the client sent as well.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from tests.support.recorded import UNMATCHED, RecordedOllama, load
from utils.burst import HEADER, opted_out, parse
from utils.engine import client as client_module
from utils.engine.client import (
    ContextFull,
    ModelNotFound,
    OllamaClient,
    RequestRefused,
    ServerError,
    Step,
)

MODEL = "qwen2.5-coder:0.5b"
PROMPT = "def fibonacci(n):\n    "  # 04-07: raw, greedy
GREEDY = {"temperature": 0}
NESTED = [load(f"11-nested-{i}").request["prompt"] for i in range(5)]  # prompts extending one another
ENGINE = Path(client_module.__file__).parent


@pytest.fixture
def ollama():
    with RecordedOllama() as server:
        yield server


@pytest.fixture
async def client(ollama):
    server = OllamaClient(ollama.url)
    yield server
    await server.aclose()


async def test_version_and_about(client, ollama):
    assert await client.version() == (0, 32, 15)
    assert await client.about() == {"version": "0.32.15"}
    # A real Ollama declares none of the embedded server's extras.
    assert not await client.is_embedded()
    assert not await client.exact_logprobs()
    assert [r.path for r in ollama.received] == ["/api/version"]  # read once per server object


async def test_list_models_and_show(client, ollama):
    assert await client.models() == ["qwen2.5-coder:1.5b", MODEL, "smollm2:135m"]
    listed = {m["model"]: m for m in await client.list_models()}
    assert listed["smollm2:135m"]["details"]["context_length"] == 8192
    assert listed[MODEL]["capabilities"] == ["completion"]

    shown = await client.show(MODEL)
    assert ollama.bodies("/api/show") == [{"model": MODEL, "verbose": False}]
    assert ollama.received[-1].matched == "03-show-qwen2_5-coder_0_5b"
    assert shown["details"]["family"] == "qwen2"
    assert shown["model_info"]["qwen2.context_length"] == 32768
    assert "parameters" not in shown  # a model without Modelfile parameters has no such field
    # smollm2's stop strings come as one text field, a line each (as for 18's model).
    assert (await client.show("smollm2:135m"))["parameters"].splitlines() == [
        'stop                           "<|im_start|>"', 'stop                           "<|im_end|>"']


async def test_next_token_gives_the_recorded_token_and_logprob(client, ollama):
    step = await client.next_token(MODEL, PROMPT, GREEDY, top_logprobs=5)
    assert ollama.received[-1].matched == "05-generate-raw-logprobs"
    sent = ollama.bodies("/api/generate")[-1]
    assert sent["raw"] is True and sent["stream"] is False and sent["logprobs"] is True
    assert sent["options"] == {"temperature": 0, "num_predict": 1} and sent["top_logprobs"] == 5

    assert step.token is not None and step.token.text == " if"
    assert step.token.logprob == -0.38765788078308105
    assert step.token.top == {" if": -0.38765788078308105, " #": -2.078890562057495, " a": -3.0686023235321045,
                              " fib": -3.357137441635132, ' """': -3.3769397735595703}
    assert step.token.complete
    assert step.done_reason == "length"  # num_predict 1 reached, not the end of the text
    assert step.prompt_tokens == 5


async def test_stream_raw_final_chunk_without_logprobs(client, ollama):
    chunks = [c async for c in client.stream_raw(MODEL, PROMPT, {**GREEDY, "num_predict": 1}, top_logprobs=5)]
    assert ollama.received[-1].matched == "06-generate-raw-logprobs-stream"
    recorded = load("06-generate-raw-logprobs-stream").json()
    assert "logprobs" not in recorded[-1] and recorded[-1]["done"] is True  # what the client must expect

    first, final = chunks
    assert (first.text, [t.text for t in first.tokens], first.done_reason) == (" if", [" if"], None)
    assert first.tokens[0].logprob == -0.38765788078308105 and len(first.tokens[0].top) == 5
    # The last chunk: statistics, no text and no logprobs; the client makes it a chunk with no tokens.
    assert (final.text, final.tokens, final.done_reason, final.prompt_tokens) == ("", [], "length", 5)


async def test_eight_tokens_in_one_answer(client, ollama):
    """07: eight positions in one body; the first is exactly 05's one-token answer."""
    answer = await client._request("POST", "/api/generate", load("07-generate-raw-logprobs-8tok").request)
    assert ollama.received[-1].matched == "07-generate-raw-logprobs-8tok"
    tokens = client_module._tokens(answer)
    assert len(tokens) == answer["eval_count"] == 8
    assert "".join(t.text for t in tokens) == answer["response"] == " if n <= 0:\n         return"
    assert all(len(t.top) == 5 and t.logprob == max(t.top.values()) for t in tokens)  # greedy
    one = await client.next_token(MODEL, PROMPT, GREEDY, top_logprobs=5)
    assert (one.token.text, one.token.logprob, one.token.top) == (tokens[0].text, tokens[0].logprob, tokens[0].top)
    # Each entry also has the token's bytes, which the client leaves aside (the text is enough here).
    assert answer["logprobs"][2]["bytes"] == list(b" <=")


async def test_a_burst_then_the_same_prompts_one_by_one(client, ollama):
    """11: five concurrent one-token requests (a validator burst of K = 4); 12: the same five one
    after another. Same tokens, same prompt counts (the whole prompt, though 12 reused a cached
    prefix), logprobs that differ slightly (a row is not computed alike in every batch)."""
    burst = await client.next_tokens(MODEL, NESTED, [GREEDY] * 5, top_logprobs=5)
    # No burst endpoint in a real Ollama's /api/version: one request each, all announcing one burst of 5.
    sent = [r for r in ollama.received if r.path == "/api/generate"]
    assert sorted(r.matched for r in sent) == [f"11-nested-{i}" for i in range(5)]
    announced = {parse(r.headers.get(HEADER)) for r in sent}
    assert len(announced) == 1 and next(iter(announced))[1] == 5

    alone = [await client.next_token(MODEL, prompt, GREEDY, top_logprobs=5) for prompt in NESTED]
    assert [r.matched for r in ollama.received[-5:]] == [f"12-sequential-{i}" for i in range(5)]
    assert HEADER not in ollama.received[-1].headers
    # Each is a piece of an answer the engine is making: a speculating server must not speculate it.
    assert all(opted_out(r.headers) for r in ollama.received[-10:])

    tokens = ["#", "   ", "       ", " fibonacci", "   "]
    assert [s.token.text for s in burst] == [s.token.text for s in alone] == tokens
    assert [s.prompt_tokens for s in burst] == [s.prompt_tokens for s in alone] == [30, 33, 42, 45, 49]
    differences = [abs(b.token.logprob - a.token.logprob) for b, a in zip(burst, alone)]
    assert 0 < max(differences) < 0.05, differences


def test_eval_duration_is_a_placeholder_the_engine_never_reads():
    """Ollama reports `eval_duration` 1000 ns for every one-token answer, however long it took (11's
    took 0.37 to 0.6 s): the engine must time its requests itself. None of its modules reads it."""
    one_token = ["05-generate-raw-logprobs", *(f"1{n}-{k}-{i}" for n, k in ((1, "nested"), (2, "sequential"))
                                               for i in range(5))]
    assert {load(name).json()["eval_duration"] for name in one_token} == {1000}
    assert load("07-generate-raw-logprobs-8tok").json()["eval_duration"] > 1000  # a real one from 2 tokens
    readers = [path.name for path in ENGINE.rglob("*.py") if re.search(r"""["']eval_duration["']""", path.read_text())]
    assert readers == []
    # The benchmark's timings come from `total_duration` and `prompt_eval_duration`, never from it.
    assert {f.name for f in dataclasses.fields(Step)} == {"token", "done_reason", "prompt_tokens", "engine_s",
                                                          "prompt_eval_s"}


async def test_context_full_is_contextfull(client, ollama):
    """21: a prompt over num_ctx with `truncate: false`; Ollama's 400 has llama-server's own JSON as
    the text of `error`."""
    prompt = load("21-chat-context-full-truncate-false").request["prompt"]
    with pytest.raises(ContextFull) as raised:
        await client.next_token(MODEL, prompt, {"num_ctx": 2048})
    assert ollama.received[-1].matched == "21-chat-context-full-truncate-false"
    assert ollama.bodies("/api/generate")[-1]["truncate"] is False  # the client never lets Ollama cut
    assert isinstance(raised.value, ServerError) and raised.value.status == 400
    inner = json.loads(str(raised.value))["error"]  # the message is llama-server's JSON, kept whole
    assert inner["type"] == "exceed_context_size_error" and (inner["n_prompt_tokens"], inner["n_ctx"]) == (9030, 2048)


async def test_think_true_on_a_model_without_thinking_is_refused(client, ollama):
    """17: 400 with Ollama's message; 16: `think: false` accepted by the same model."""
    with pytest.raises(RequestRefused) as raised:
        await client._request("POST", "/api/generate", load("17-generate-raw-think-true").request)
    assert ollama.received[-1].matched == "17-generate-raw-think-true"
    assert not isinstance(raised.value, ContextFull | ModelNotFound)
    assert raised.value.status == 400 and str(raised.value) == '"qwen2.5-coder:0.5b" does not support thinking'
    accepted = await client._request("POST", "/api/generate", load("16-generate-raw-think-false").request)
    assert accepted["done"] is True and "logprobs" not in accepted  # not asked for, none sent


async def test_the_client_sends_only_fields_a_real_ollama_was_sent(client, ollama):
    """Every field of the client's one-token request is in a recorded /api/generate request, with a
    value of the same JSON type (a field Ollama did not know would be silently dropped)."""
    await client.next_token(MODEL, PROMPT, GREEDY, top_logprobs=5)
    sent = ollama.bodies("/api/generate")[-1]
    recorded: dict[str, set[str]] = {}
    for name in ("05-generate-raw-logprobs", "16-generate-raw-think-false", "21-chat-context-full-truncate-false"):
        for key, value in load(name).request.items():
            recorded.setdefault(key, set()).add(type(value).__name__)
    unknown = {key: type(value).__name__ for key, value in sent.items()
               if type(value).__name__ not in recorded.get(key, ())}
    assert unknown == {}


async def test_render_chat_reads_debug_render_only(client, ollama):
    """09: 200, `done: false`, the prompt in `_debug_info.rendered_template`, with the Qwen template's
    default system prompt."""
    messages = load("09-chat-debug-render-only").request["messages"]
    rendered = await client.render_chat(MODEL, messages, {})
    assert ollama.received[-1].matched == "09-chat-debug-render-only"
    sent = ollama.bodies("/api/chat")[-1]
    assert sent["_debug_render_only"] is True and sent["stream"] is False and "think" not in sent
    assert rendered.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")
    assert rendered.endswith(f"<|im_start|>user\n{messages[0]['content']}<|im_end|>\n<|im_start|>assistant\n")


async def test_running_models_context_length(client):
    [loaded] = await client.running()
    assert (loaded["model"], loaded["context_length"]) == (MODEL, 4096)  # 14: one slot's context (-c 20480, 5 slots)
    [loaded] = await client.running()  # 20, served next: a model whose Modelfile sets num_ctx 8192
    assert (loaded["model"], loaded["context_length"]) == ("q05-greedy:latest", 8192)


async def test_the_replay_server_names_what_it_could_not_match(client, ollama):
    with pytest.raises(ServerError) as raised:
        await client.next_token("no-such-model", PROMPT, GREEDY)
    assert raised.value.status == UNMATCHED and "no-such-model" in str(raised.value)
    assert ollama.received[-1].matched is None and ollama.received[-1].json()["model"] == "no-such-model"
    # The rule's tie-break: without logprobs the warm-up (04) answers, with them 05.
    assert ollama.match("POST", "/api/generate", json.dumps(load("04-generate-warmup").request).encode()).name \
        == "04-generate-warmup"
