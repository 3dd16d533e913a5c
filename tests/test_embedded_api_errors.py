"""The embedded server's Ollama API on real models: logprobs in Ollama's shape, errors as Ollama gives
them (status and an `error` field), and the text assembler below the HTTP layer.

The tests share one server and so one loaded model per name: a test that loads a model with another
`num_ctx` puts the default context back before it ends.
"""

from __future__ import annotations

import json

import ollama
import pytest

from tests.support.embedded_api import CODE_CONTEXT, COUNTING, GREEDY, greedy, http, restore_default_context
from tests.support.models import SMALL

# -- logprobs --------------------------------------------------------------------------------------


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


# -- errors ----------------------------------------------------------------------------------------


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


# -- below the HTTP layer --------------------------------------------------------------------------


def test_tokens_after_a_stop_string_are_dropped():
    """The worker thread may emit tokens before it sees the cancellation a stop string sets; they are
    past the stop and must not reach the answer. Here they all arrive at once, as on a busy server."""
    from utils.embedded.http.text import TextAssembler

    assembler = TextAssembler(["."])
    pieces = [assembler.feed(piece) for piece in (b"one", b".", b" two", b" three")]
    assert "".join(pieces) + assembler.flush() == "one"
    assert assembler.stopped
