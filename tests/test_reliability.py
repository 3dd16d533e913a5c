"""Reliability: faults (a draft or target server killed or stalled mid-answer), time limits, load,
a short soak, a fuzz of the embedded API's OpenAPI description, and what the servers expose.

Nothing is lost: a failed draft gives the standard answer; a failed target keeps the partial answer
and says which server failed; a stalled server is a timeout error, never a hang.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import tomllib
from collections import Counter
from pathlib import Path

import httpx
import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase

import utils.embedded.server as embedded_server
from config import Settings
from tests.support.engine import answer, settings
from tests.support.models import SMALL
from utils.bench import soak
from utils.embedded.server import EmbeddedServer
from utils.engine.answer import collect
from utils.engine.client import OllamaClient, ServerError
from utils.engine.decoder import build_decoder
from utils.engine.events import DoneEvent, FallbackEvent, GenerationError, RoundEvent, TextEvent
from utils.engine.request import GenerationRequest
from utils.hosts import HostError, generate_once, servers

ROOT = Path(__file__).resolve().parents[1]
QWEN = "qwen2.5-coder:0.5b"
LONG_PROMPT = "Count from 1 to 100, one number per line."
PROMPT_SET = [json.loads(line) for line in (ROOT / "prompts" / "bench.jsonl").open()]
PROMPTS = [p["prompt"] for p in PROMPT_SET]


def pause(server: EmbeddedServer) -> None:
    os.kill(server.process.pid, signal.SIGSTOP)  # alive, port open, answers nothing


def resume(server: EmbeddedServer) -> None:
    if server.process is not None and server.process.poll() is None:
        os.kill(server.process.pid, signal.SIGCONT)




# -- faults ----------------------------------------------------------------------------------------


async def test_draft_server_stalled_mid_answer_gives_the_standard_answer(server_url, tmp_path):
    request = GenerationRequest(prompt=PROMPTS[0], max_tokens=40, k=3)
    standard = await answer(server_url, QWEN, "none", request)
    draft_server = EmbeddedServer(log_path=tmp_path / "draft.log")
    draft_url = draft_server.start()
    draft_timeout = 10.0  # a healthy draft takes well under a second, but this machine is shared
    target, draft = OllamaClient(server_url), OllamaClient(draft_url, timeout=120)  # the loop's limit must act
    pieces, fallbacks, stalled_at, done = [], [], None, None
    try:
        await draft.next_token(SMALL, "Hi", {"num_ctx": 4096})  # loaded before the clock matters
        decoder = await build_decoder(settings(draft_timeout=draft_timeout).engine, target, QWEN, SMALL, draft)
        async for event in decoder.stream(request):
            if isinstance(event, RoundEvent) and event.record.drafted and stalled_at is None:
                pause(draft_server)
                stalled_at = (len(pieces), time.monotonic())
            elif isinstance(event, TextEvent):
                pieces.append(event.text)
            elif isinstance(event, FallbackEvent):
                fallbacks.append((event.reason, time.monotonic()))
            elif isinstance(event, DoneEvent):
                done = event
    finally:
        resume(draft_server)
        draft_server.stop()
        await target.aclose()
        await draft.aclose()
    assert stalled_at is not None and stalled_at[0] < len(pieces)
    assert done.text == "".join(pieces) == standard["text"]
    [(reason, at)] = fallbacks
    assert "took too long" in reason and SMALL in reason
    assert draft_timeout - 0.5 < at - stalled_at[1] < draft_timeout + 10  # the draft limit, not a hang
    assert done.stats.fallbacks and done.stats.fallbacks[0].reason == reason
    assert done.stats.standard_tokens > 0


async def test_target_server_killed_mid_answer_keeps_the_partial_answer_then_a_retry_works(server_url, tmp_path):
    request = GenerationRequest(prompt=LONG_PROMPT, max_tokens=60, k=3)
    standard = await answer(server_url, SMALL, "none", request)
    target_server = EmbeddedServer(log_path=tmp_path / "target.log")
    url = target_server.start()
    target = OllamaClient(url)
    pieces = []
    try:
        decoder = await build_decoder(settings().engine, target, SMALL, "lookup")
        with pytest.raises(GenerationError) as caught:
            async for event in decoder.stream(request):
                if isinstance(event, TextEvent):
                    pieces.append(event.text)
                    if len(pieces) == 4:
                        target_server.process.kill()  # SIGKILL: open streams are cut
                        target_server.process.wait()
        error = caught.value
        assert url in error.message, error.message  # which server failed
        assert error.partial == "".join(pieces) and error.partial, error.partial
        assert standard["text"].startswith(error.partial) and len(error.partial) < len(standard["text"])

        # The same server comes back on the same address: the same decoder answers in full.
        restarted = EmbeddedServer(port=target_server.port, log_path=tmp_path / "restarted.log")
        restarted.start()
        try:
            result = await collect(decoder, request)
        finally:
            restarted.stop()
        assert result["text"] == standard["text"]
    finally:
        target_server.stop()
        await target.aclose()


async def test_a_stalled_target_is_a_timeout_error_not_a_hang(server_url, tmp_path):
    limit = 3.0
    request = GenerationRequest(prompt=LONG_PROMPT, max_tokens=60, k=3)
    standard = await answer(server_url, SMALL, "none", request)
    target_server = EmbeddedServer(log_path=tmp_path / "target.log")
    url = target_server.start()
    quick = settings(connect_timeout=limit, request_timeout=limit, verify_timeout=limit)
    target, _ = servers(quick, url)
    try:
        # Mid-answer: the partial answer is kept and the error names the server and the limit.
        decoder = await build_decoder(quick.engine, target, SMALL, "lookup")
        pieces, stalled_at = [], None
        with pytest.raises(GenerationError) as caught:
            async for event in decoder.stream(request):
                if isinstance(event, TextEvent):
                    pieces.append(event.text)
                    if len(pieces) == 4:
                        pause(target_server)
                        stalled_at = time.monotonic()
        waited = time.monotonic() - stalled_at
        # The limit is waited for, on a timer (the stalled server uses no time): no less than it, and
        # at most a verification's and a standard read's (a second of slack for this side's work).
        print(f"stalled mid-answer: gave up after {waited:.2f} s (limit {limit:g} s)")
        assert limit * 0.9 <= waited < 2 * limit + 1, waited
        assert f"the Ollama server at {url} did not answer within {limit:g} s" in caught.value.message
        assert caught.value.partial == "".join(pieces) and standard["text"].startswith(caught.value.partial)

        # Before any answer: every entry point gives up within its limit.
        started = time.monotonic()
        with pytest.raises(ServerError, match="did not answer within"):
            await target.show(SMALL)
        shown = time.monotonic() - started
        started = time.monotonic()
        with pytest.raises(HostError, match=f"cannot reach the Ollama server at {url}"):
            await generate_once(quick, request, target=SMALL, drafter="none", host=url)
        generated = time.monotonic() - started
        print(f"stalled before an answer: show gave up after {shown:.2f} s, generate_once after {generated:.2f} s")
        assert limit * 0.9 <= shown < limit + 1, shown  # one request: its limit, on a timer
        assert limit * 0.9 <= generated < 2 * limit + 1, generated  # connecting, then at most one read

        resume(target_server)  # and it serves again (the default limits: it first clears what piled up)
        assert (await answer(url, SMALL, "lookup", request))["text"] == standard["text"]
    finally:
        resume(target_server)
        target_server.stop()
        await target.aclose()


async def test_every_network_call_has_a_time_limit(server_url):
    defaults = Settings()
    assert 0 < defaults.engine.connect_timeout <= 30
    assert 0 < defaults.engine.draft_timeout <= defaults.engine.verify_timeout <= defaults.engine.request_timeout <= 600
    custom = settings(connect_timeout=1.5, request_timeout=7, draft_timeout=2)
    target, draft = servers(custom, server_url, server_url)
    try:
        # The engine's transport: connecting, and every wait for the server's next bytes.
        assert (target.http.connect_timeout, target.http.read_timeout) == (1.5, 7)
        assert (draft.http.connect_timeout, draft.http.read_timeout) == (1.5, 2)
    finally:
        await target.aclose()
        await draft.aclose()
    bare = OllamaClient(server_url)  # even without settings: finite limits
    try:
        assert all(value is not None and value > 0 for value in (bare.http.connect_timeout, bare.http.read_timeout))
    finally:
        await bare.aclose()


# -- load ------------------------------------------------------------------------------------------

# Editing and summarising prompts: prompt lookup finds drafts in them, so every answer speculates.
LOAD_PROMPTS = [p["prompt"] for c in ("edit", "summarize") for p in PROMPT_SET if p["category"] == c][::3][:8]


async def test_eight_concurrent_speculative_answers_equal_their_single_runs(server_url):
    requests = [GenerationRequest(prompt=prompt, max_tokens=24, k=3) for prompt in LOAD_PROMPTS]
    # One at a time, standard generation: what every greedy answer must be, speculative or not.
    started = time.monotonic()
    single = [await answer(server_url, QWEN, "none", request) for request in requests]
    alone_s = time.monotonic() - started
    together = await asyncio.gather(*(answer(server_url, QWEN, "lookup", request) for request in requests))
    print(f"8 standard answers one by one: {alone_s:.0f} s; 8 speculative at once: "
          f"{time.monotonic() - started - alone_s:.0f} s")
    for alone, loaded in zip(single, together):
        assert loaded["stats"]["output_tokens"] > 0
        assert loaded["text"] == alone["text"]
    assert sum(1 for result in together if result["stats"]["accepted_tokens"] > 0) >= 6  # they did speculate


def test_soak_keeps_memory_bounded_and_fails_nothing(capsys):
    """A short run of the soak command (the full one: python cli.py bench-soak --requests 300)."""
    code = soak.main(["--requests", "40", "--time-limit", "240", "--concurrency", "4"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "failures: 0" in out and "server RSS: after start-up" in out
    sent = int(out.split("requests sent: ")[1].split()[0])
    assert sent >= 40


# -- fuzzing the embedded API ---------------------------------------------------------------------

# Per operation and mode: a bounded run on a shared two-core machine.
FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", 25))


def tame(case) -> None:
    """Keep generated requests cheap: a real model in about half of them, few tokens, no reloads."""
    body = case.body
    if not isinstance(body, dict):
        return
    if "model" in body and isinstance(body["model"], str) and len(repr(body)) % 2 == 0:
        body["model"] = SMALL
    options = body.get("options", {})
    if isinstance(options, dict):
        if isinstance(options.get("num_predict", -1), int):
            options["num_predict"] = 2
        options.pop("num_ctx", None)  # every new context size reloads the model
        body["options"] = options


def test_fuzzing_the_openapi_description_finds_no_server_errors(server_url):
    schema = schemathesis.openapi.from_url(f"{server_url}/openapi.json")
    assert {"/api/show", "/api/generate", "/api/chat"} <= set(schema.raw_schema["paths"])
    seen: list[tuple[str, int]] = []

    def fuzz(path: str, mode: schemathesis.GenerationMode) -> None:
        @hypothesis.given(case=schema[path]["POST"].as_strategy(generation_mode=mode))
        @hypothesis.settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, derandomize=True,
                             phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        def check(case) -> None:
            tame(case)
            response = case.call(base_url=server_url, timeout=120)
            seen.append((path, response.status_code))
            # 501: a field this server refuses on purpose (template, context), with a sentence
            assert response.status_code < 500 or response.status_code == 501, \
                (case.body, response.status_code, response.text[:500])
            if response.status_code >= 400:
                assert isinstance(response.json().get("error"), str), response.text[:500]

        check()

    for path in ("/api/show", "/api/generate", "/api/chat"):
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            fuzz(path, mode)
    statuses = {status for _, status in seen}
    print(sorted(Counter(seen).items()))
    assert 200 in statuses and statuses & {400, 404}, statuses  # both real answers and refusals were fuzzed
    assert httpx.get(f"{server_url}/api/version", timeout=60).status_code == 200


# -- security -------------------------------------------------------------------------------------


ENDPOINTS = {
    "/", "/api/version", "/api/tags", "/api/ps", "/api/show", "/api/generate", "/api/chat",  # generation
    "/api/embed", "/api/embeddings", "/v1/embeddings",  # embeddings
    "/api/pull", "/api/push", "/api/create", "/api/copy", "/api/delete", "/api/blobs/{digest}",  # models
    "/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/models/{model}",  # OpenAI
    "/speculative/burst",  # a validator's burst in one request
}


async def test_the_api_has_only_its_endpoints_and_reads_no_arbitrary_file(server_url):
    async with httpx.AsyncClient(base_url=server_url, timeout=60) as http:
        paths = set((await http.get("/openapi.json")).json()["paths"])
        assert paths == ENDPOINTS
        # Paths and names that point at files outside the models are refused, and nothing of them is read
        # back: /api/create takes a GGUF path, so a file that is no GGUF must be a refusal, not a model.
        for method, path, body in (
            ("POST", "/api/create", {"model": "passwd", "from": "/etc/passwd"}),
            ("POST", "/api/create", {"model": "passwd", "modelfile": "FROM /etc/passwd"}),
            ("POST", "/api/pull", {"model": "../../etc/passwd"}),
            ("POST", "/api/show", {"model": "/etc/passwd"}),
            ("POST", "/api/push", {"model": SMALL}),
            ("POST", "/api/blobs/sha256:00", None),
            ("GET", "/../../etc/passwd", None),
            ("GET", "/api/show?model=/etc/passwd", None),
        ):
            reply = await http.request(method, path, json=body)
            assert 400 <= reply.status_code < 500 or reply.status_code == 501, (path, body, reply.status_code)
            assert "root:" not in reply.text
        assert "passwd" not in {m["name"] for m in (await http.get("/api/tags")).json()["models"]}
        show = (await http.post("/api/show", json={"model": SMALL})).json()
        assert show["modelfile"] == f"FROM {Settings().models_dir / 'SmolLM2-135M-Instruct.Q4_1.gguf'}"


def test_servers_listen_on_localhost_by_default_and_say_what_binding_elsewhere_means(monkeypatch, capsys):
    assert EmbeddedServer().url.startswith("http://127.0.0.1:")
    assert Settings().embedded_host == "127.0.0.1"
    import cli

    serve = cli.build_parser().parse_args(["serve"])
    assert serve.host == "127.0.0.1"
    streamlit = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert streamlit["server"]["address"] == "127.0.0.1"

    import uvicorn

    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: calls.append(kwargs))
    cli.cmd_serve(cli.build_parser().parse_args(["serve", "--port", "1"]))  # as a user starts it
    said = capsys.readouterr().err  # what it speculates, and no warning
    assert said.startswith("embedded server on http://127.0.0.1:1; speculation on") and "warning" not in said
    embedded_server.serve("0.0.0.0", 1, Settings())
    warning = capsys.readouterr().err
    assert "warning: listening on 0.0.0.0" in warning and "no authentication" in warning
    assert [c["host"] for c in calls] == ["127.0.0.1", "0.0.0.0"]
