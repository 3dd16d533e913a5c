"""Small behaviours of Ollama's that real clients rely on, on the embedded server: name spellings, the
404 for a bare family name, refusals for what a model cannot do (images, think, suffix without FIM
tokens), fill-in-the-middle where the model has the tokens, keep_alive and expires_at, HEAD, CORS.
Every refusal is a 4xx with a message, and the server answers normally after it."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import httpx
import ollama
import pytest

SMALL = "smollm2:135m"
CODER = "qwen2.5-coder:0.5b"
QUICK = {"temperature": 0, "num_predict": 3}


def http(url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, timeout=180)


async def still_serving(url: str) -> None:
    async with http(url) as h:
        reply = await h.post("/api/generate", json={"model": SMALL, "prompt": "Hi", "stream": False, "options": QUICK})
    assert reply.status_code == 200 and reply.json()["done"], reply.text


def moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def loaded(client: ollama.AsyncClient) -> dict[str, object]:
    return {model.model: model for model in (await client.ps()).models}


@pytest.mark.parametrize("spelling", [SMALL, "SmolLM2:135M", "library/smollm2:135m",
                                      "registry.ollama.ai/library/smollm2:135m"])
async def test_name_spellings_ollama_accepts(client, spelling):
    answer = await client.generate(model=spelling, prompt="Hi", options=QUICK)
    assert answer.done and answer.model == spelling  # Ollama echoes the name as it was sent
    assert (await client.show(spelling)).details.format == "gguf"
    assert len((await client.embed(model=spelling, input="x")).embeddings) == 1


async def test_a_bare_family_name_is_404_listing_the_installed_tags(client, server_url):
    with pytest.raises(ollama.ResponseError) as missing:
        await client.generate(model="smollm2", prompt="Hi")
    assert missing.value.status_code == 404
    assert missing.value.error == "model 'smollm2' not found (a name without a tag means smollm2:latest); " \
                                  "installed: smollm2:135m"
    with pytest.raises(ollama.ResponseError) as missing:
        await client.chat(model="qwen2.5-coder", messages=[{"role": "user", "content": "Hi"}])
    assert missing.value.status_code == 404 and "qwen2.5-coder:0.5b" in missing.value.error
    assert "qwen2.5-coder:1.5b" in missing.value.error
    with pytest.raises(ollama.ResponseError) as missing:
        await client.generate(model="nosuch", prompt="Hi")
    assert missing.value.status_code == 404 and missing.value.error == "model 'nosuch' not found"
    await still_serving(server_url)


async def test_think_and_images_are_refused_as_ollama_does(client, server_url):
    image = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg=="
    with pytest.raises(ollama.ResponseError) as refused:
        await client.generate(model=SMALL, prompt="Hi", think=True)
    assert refused.value.status_code == 400 and refused.value.error == f'"{SMALL}" does not support thinking'
    with pytest.raises(ollama.ResponseError) as refused:
        await client.chat(model=SMALL, messages=[{"role": "user", "content": "Hi"}], think="high")
    assert refused.value.status_code == 400 and "does not support thinking" in refused.value.error
    with pytest.raises(ollama.ResponseError) as refused:
        await client.generate(model=SMALL, prompt="What is this?", images=[image])
    assert refused.value.status_code == 400
    assert refused.value.error == "this model is missing data required for image input"
    with pytest.raises(ollama.ResponseError) as refused:
        await client.chat(model=SMALL, messages=[{"role": "user", "content": "What is this?", "images": [image]}])
    assert refused.value.status_code == 400 and "image input" in refused.value.error
    answer = await client.generate(model=SMALL, prompt="Hi", think=False, options=QUICK)  # false asks nothing
    assert answer.done
    await still_serving(server_url)


async def test_suffix_uses_the_models_fill_in_the_middle_tokens(client, server_url):
    prefix, suffix = "def add(a, b):\n    ", "\n\nprint(add(1, 2))\n"
    async with http(server_url) as h:
        body = {"model": CODER, "prompt": prefix, "suffix": suffix, "_debug_render_only": True}
        rendered = (await h.post("/api/generate", json=body)).json()["_debug_info"]["rendered_template"]
    assert rendered == f"<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>"
    middle = await client.generate(model=CODER, prompt=prefix, suffix=suffix,
                                   options={"temperature": 0, "num_predict": 12})
    assert "return a + b" in middle.response and "<|im_start|>" not in middle.response
    shown = await client.show(CODER)
    assert "insert" in shown.capabilities and "insert" not in (await client.show(SMALL)).capabilities


async def test_suffix_is_refused_where_it_cannot_be_used(server_url):
    async with http(server_url) as h:
        for body, words in (
            ({"model": SMALL, "prompt": "def f(", "suffix": "return 1"}, "does not support insert"),
            ({"model": CODER, "prompt": "def f(", "suffix": "return 1", "raw": True}, "raw mode"),
            ({"model": CODER, "prompt": "def f(", "suffix": "return 1", "system": "Be brief."}, "system"),
        ):
            reply = await h.post("/api/generate", json=body)
            assert reply.status_code == 400 and words in reply.json()["error"], (body, reply.text)
    await still_serving(server_url)


async def test_keep_alive_sets_expires_at_and_zero_unloads(client, server_url):
    async def expires_after(keep_alive: Any) -> tuple[float, float]:
        """How far past the moment it was asked, and the moment it answered, the model's expiry lies
        after a request with `keep_alive`: the time between is the request's, however long it took."""
        asked = datetime.now(UTC)
        await client.generate(model=SMALL, prompt="Hi", options=QUICK, keep_alive=keep_alive)
        answered = datetime.now(UTC)
        expires = moment((await loaded(client))[SMALL].expires_at.isoformat())
        return (expires - asked).total_seconds(), (expires - answered).total_seconds()

    after_asked, after_answered = await expires_after("10m")
    assert after_asked >= 599 and after_answered <= 601, (after_asked, after_answered)
    after_asked, after_answered = await expires_after(90)  # a number is seconds
    assert after_asked >= 89 and after_answered <= 91, (after_asked, after_answered)
    await client.generate(model=SMALL, prompt="Hi", options=QUICK, keep_alive=-1)  # negative: for ever
    assert (await loaded(client))[SMALL].expires_at.year > 2200

    unloaded = await client.generate(model=SMALL, prompt="", keep_alive=0)  # Ollama's unload request
    assert unloaded.done and unloaded.done_reason == "unload"
    assert SMALL not in await loaded(client)

    answer = await client.generate(model=SMALL, prompt="Hi", options=QUICK, keep_alive=0)  # answer, then unload
    assert answer.done and answer.response
    deadline = time.monotonic() + 120
    while SMALL in await loaded(client) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert SMALL not in await loaded(client)

    async with http(server_url) as h:
        reply = await h.post("/api/generate", json={"model": SMALL, "prompt": "Hi", "keep_alive": "later"})
        assert reply.status_code == 400 and "invalid duration" in reply.json()["error"]
    asked = datetime.now(UTC)
    await still_serving(server_url)  # loads it again, with the default 5 minutes
    expires = moment((await loaded(client))[SMALL].expires_at.isoformat())
    assert (expires - asked).total_seconds() >= 299 and (expires - datetime.now(UTC)).total_seconds() <= 301


async def test_head_answers_200_without_a_body(server_url):
    async with http(server_url) as h:
        for path in ("/", "/api/version", "/api/tags"):
            reply = await h.head(path)
            assert reply.status_code == 200 and reply.content == b"", path
        assert (await h.get("/")).text == "Ollama is running"


async def test_cors_allows_what_ollama_allows_by_default(server_url):
    async with http(server_url) as h:
        for origin in ("http://localhost:3000", "http://127.0.0.1", "app://obsidian.md", "vscode-webview://abc"):
            reply = await h.options("/api/chat", headers={"Origin": origin, "Access-Control-Request-Method": "POST"})
            assert reply.status_code == 200 and reply.headers["access-control-allow-origin"] == origin, origin
            reply = await h.get("/api/tags", headers={"Origin": origin})
            assert reply.headers["access-control-allow-origin"] == origin
        reply = await h.options("/api/chat", headers={"Origin": "https://evil.example",
                                                      "Access-Control-Request-Method": "POST"})
        assert reply.status_code == 400 and "access-control-allow-origin" not in reply.headers
        reply = await h.get("/api/tags", headers={"Origin": "https://evil.example"})
        assert reply.status_code == 200 and "access-control-allow-origin" not in reply.headers


async def test_template_and_context_are_refused_not_dropped(server_url):
    async with http(server_url) as h:
        for body, words in (
            ({"model": SMALL, "prompt": "Hi", "template": "{{ .Prompt }}"}, "template is not supported"),
            ({"model": SMALL, "prompt": "Hi", "context": [1, 2, 3]}, "context is not supported"),
        ):
            reply = await h.post("/api/generate", json=body)
            assert reply.status_code == 501 and words in reply.json()["error"], (body, reply.text)
        reply = await h.post("/api/generate", json={"model": SMALL, "prompt": "Hi", "context": [], "stream": False,
                                                    "options": QUICK})
        assert reply.status_code == 200  # an empty context asks for nothing
    await still_serving(server_url)
