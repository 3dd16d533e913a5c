"""No client cuts another's answer: clients that share a model and disagree about it (aider sends
`num_ctx` 9200, Open WebUI 2048; litellm asks `/api/show` at an answer's first chunk; a client unloads
with `keep_alive: 0`), on the embedded server with speculation off (the session's server) and on
(`served`, which speculates every answer of DRAFT by prompt lookup).

As in Ollama: `/api/show` reads the model's file and loads nothing; a request that needs the model
reloaded waits until the answers in flight end, then answers; an unload is answered at once and
done when they end. Before this was so, each of these requests ended the answer in flight after a
few tokens with `done_reason: "length"` and status 200.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from tests.support.models import DRAFT, SMALL, TARGET

TOKENS = 64
QUESTION = "Count from 1 to 100 in words, separated by commas."


@pytest.fixture(params=["off", "on"])
def url(request: pytest.FixtureRequest) -> str:
    """The server with speculation off, then on (DRAFT's answers speculated)."""
    return request.getfixturevalue("server_url" if request.param == "off" else "served")


def speculates(url: str) -> bool:
    return "speculation_events" in httpx.get(f"{url}/api/version", timeout=30).json()


def chat(num_ctx: int | None, stream: bool, tokens: int = TOKENS) -> dict[str, Any]:
    options: dict[str, Any] = {"temperature": 0, "num_predict": tokens}
    if num_ctx:
        options["num_ctx"] = num_ctx
    return {"model": DRAFT, "messages": [{"role": "user", "content": QUESTION}], "stream": stream, "options": options}


async def answer(http: httpx.AsyncClient, body: dict[str, Any], at_third_chunk: Any = None) -> tuple[str, dict]:
    """The answer's text and final message; `at_third_chunk()` is started after its third chunk (a
    non-streamed answer: once the server has loaded the model for it, unloaded first, so that the
    answer is under way however fast or slow the machine is)."""
    if not body["stream"]:
        if at_third_chunk is not None:
            await http.post("/api/generate", json={"model": body["model"], "keep_alive": 0})
        asked = asyncio.create_task(http.post("/api/chat", json=body))
        if at_third_chunk is not None:
            deadline = time.monotonic() + 600
            while body["model"] not in await loaded(http) and not asked.done() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            at_third_chunk()
        reply = await asked
        assert reply.status_code == 200, reply.text
        final = reply.json()
        return final["message"]["content"], final
    parts, final = [], {}
    async with http.stream("POST", "/api/chat", json=body) as reply:
        assert reply.status_code == 200
        async for line in reply.aiter_lines():
            message = json.loads(line)
            assert "error" not in message, message
            if message["done"]:
                final = message
            else:
                parts.append(message["message"]["content"])
                if len(parts) == 3 and at_third_chunk is not None:
                    at_third_chunk()
    return "".join(parts), final


async def loaded(http: httpx.AsyncClient) -> dict[str, int]:
    return {m["name"]: m["context_length"] for m in (await http.get("/api/ps")).json()["models"]}


async def test_show_reads_the_file_and_loads_nothing(server_url):
    async with httpx.AsyncClient(base_url=server_url, timeout=300) as http:
        await http.post("/api/generate", json={"model": SMALL, "prompt": "Hi", "stream": False,
                                                "options": {"num_predict": 1, "num_ctx": 1536}})
        await http.post("/api/generate", json={"model": TARGET, "keep_alive": 0})  # not loaded, now
        before = await loaded(http)
        assert before.get(SMALL) == 1536 and TARGET not in before
        for model in (SMALL, TARGET):
            shown = (await http.post("/api/show", json={"model": model, "verbose": True})).json()
            assert shown["model_info"]["tokenizer.ggml.tokens"] and shown["capabilities"]
        quick = await http.post("/api/show", json={"model": TARGET})
        assert "tools" in quick.json()["capabilities"] and quick.elapsed.total_seconds() < 1.0
        assert await loaded(http) == before  # nothing loaded, nothing reloaded
        await http.post("/api/generate", json={"model": SMALL, "keep_alive": 0})


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_an_answer_survives_show_another_num_ctx_and_an_unload(url, stream):
    """aider's sequence (`/api/show`, its answer with num_ctx 9200, `/api/show` again at the first
    chunks), with another client's num_ctx 2048 and another's `keep_alive: 0` arriving mid-answer."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as http:
        alone, _ = await answer(http, chat(9200, stream=True))
        others: dict[str, asyncio.Task] = {}
        done_at: dict[str, float] = {}

        async def timed(name: str, request: Any) -> httpx.Response:
            reply = await request
            done_at[name] = time.perf_counter()
            return reply

        def interlopers() -> None:
            done_at["asked"] = time.perf_counter()
            others["show"] = asyncio.create_task(timed("show", http.post("/api/show", json={"model": DRAFT})))
            others["other num_ctx"] = asyncio.create_task(timed("other num_ctx", http.post("/api/chat", json=chat(
                2048, stream=False, tokens=8))))
            others["unload"] = asyncio.create_task(timed("unload", http.post(
                "/api/generate", json={"model": DRAFT, "keep_alive": 0})))

        assert (await http.post("/api/show", json={"model": DRAFT})).status_code == 200
        text, final = await answer(http, chat(9200, stream), interlopers)
        finished = time.perf_counter()
        replies = {name: await task for name, task in others.items()}
        assert done_at["asked"] < finished, "the answer ended before the other requests were sent"
        assert final["done_reason"] == "length" and final["eval_count"] == TOKENS, final
        assert text == alone
        assert all(reply.status_code == 200 for reply in replies.values()), {n: r.text for n, r in replies.items()}
        assert replies["unload"].json()["done_reason"] == "unload"
        assert done_at["unload"] < finished and done_at["show"] < finished  # neither waited for the answer
        other = replies["other num_ctx"].json()
        assert other["done_reason"] == "length" and other["eval_count"] == 8
        assert done_at["other num_ctx"] > finished and other["load_duration"] > 0  # reloaded after it
        assert (await loaded(http)).get(DRAFT) == 2048
        assert ("speculative" in final) == speculates(url)  # speculated where it speculates
        await http.post("/api/generate", json={"model": DRAFT, "keep_alive": 0})


def test_litellm_streams_with_its_num_ctx_and_its_show_at_the_first_chunk(url, monkeypatch):
    """litellm (aider's client) against the server: it asks `/api/show` when the first chunk comes."""
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download of its price list at import
    import litellm

    ask = {"model": f"ollama_chat/{DRAFT}", "messages": [{"role": "user", "content": QUESTION}], "temperature": 0,
           "max_tokens": TOKENS, "num_ctx": 9200, "api_base": url}
    chunks = list(litellm.completion(stream=True, **ask))  # first: litellm keeps what /api/show told it
    whole = litellm.completion(**ask)
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    assert whole.usage.completion_tokens == TOKENS and whole.choices[0].finish_reason == "length"
    assert streamed == whole.choices[0].message.content
    httpx.post(f"{url}/api/generate", json={"model": DRAFT, "keep_alive": 0}, timeout=60)


async def test_a_reload_that_waits_for_a_held_model_lets_other_models_load():
    """In process: a speculated answer holds its model while another client's num_ctx waits to reload
    it; the answer may still need another model loaded (a draft model's first use), and gets it (one
    lock for every model made that a deadlock). Requests for the held model queue behind the reload."""
    from config import Settings
    from utils.embedded.server import load_app

    load_app()  # llama.cpp's libraries first
    from utils.embedded.runtime.loaded import LoadedModels
    from utils.embedded.store.models import ModelStore

    models = LoadedModels(ModelStore(Settings().models_dir), threads=2, batch=True, fast_batches=False,
                          gpu_layers=0, parallel=2)
    try:
        async with models.hold(SMALL, 1024):
            reload = asyncio.create_task(models.get(SMALL, 1536))
            deadline = time.monotonic() + 60
            while SMALL not in models.changing and not reload.done() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)  # until the reload has taken the model's turn and waits in it
            assert not reload.done() and models.ready(SMALL, 1024) is not None  # the holder still gets it
            other, load = await asyncio.wait_for(models.get(DRAFT, 1024), 60)
            assert other.num_ctx == 1024 and load > 0
            assert not reload.done()
        runner, load = await asyncio.wait_for(reload, 120)
        assert runner.num_ctx == 1536 and load > 0
    finally:
        await models.close()
