"""`cli.py serve` speculating inside the server (its in-process target, utils/embedded/http/target.py),
driven by the clients people use: ollama-python and the OpenAI SDK, streamed and not.

Greedy answers must equal the same server's answers with speculation off (`X-Speculation: off`),
word for word, on the 32 equality prompts, for prompt lookup and the Qwen pair; sampled answers must
keep the target's distribution; `/metrics` must show that drafts were really verified.
"""

from __future__ import annotations

import json
import re
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import jsonschema
import ollama
import openai
import pytest

from tests.support.distribution import assert_fits, sampled_first_tokens
from tests.support.embedded_api import COUNTING
from tests.support.models import DRAFT, TARGET
from tests.support.prompts import COLOURS, EQUALITY_PROMPTS, PAIR_PROMPTS
from utils.embedded.server import EmbeddedServer
from utils.sampling import SamplingOptions, text_distribution

TOKENS = 32
OFF = {"X-Speculation": "off"}


def drafted(url: str, model: str) -> tuple[int, int]:
    """(drafted, accepted) tokens so far for `model`, from the server's /metrics."""
    text = httpx.get(f"{url}/metrics", timeout=30).text

    def total(name: str) -> int:
        pattern = rf'^{name}{{[^}}]*target="{re.escape(model)}"[^}}]*}} (\d+)'
        return sum(int(value) for value in re.findall(pattern, text, re.M))

    return total("spec_decode_num_draft_tokens_total"), total("spec_decode_num_accepted_tokens_total")


def answer_text(url: str, model: str, prompt: str, way: int, headers: dict[str, str] | None) -> str:
    """One greedy answer, in one of four ways a client asks: ollama-python generate (whole) and chat
    (streamed), the OpenAI SDK's chat (whole) and completions (streamed)."""
    options = {"temperature": 0, "num_predict": TOKENS}
    if way < 2:
        client = ollama.Client(host=url, headers=headers or {}, timeout=600)
        if way == 0:
            return client.generate(model=model, prompt=prompt, options=options).response
        parts = client.chat(model=model, messages=[{"role": "user", "content": prompt}], options=options, stream=True)
        return "".join(part.message.content for part in parts)
    sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", default_headers=headers or {}, timeout=600)
    if way == 2:
        reply = sdk.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                            temperature=0, max_tokens=TOKENS)
        return reply.choices[0].message.content or ""
    stream = sdk.completions.create(model=model, prompt=prompt, temperature=0, max_tokens=TOKENS, stream=True)
    return "".join(chunk.choices[0].text for chunk in stream if chunk.choices)


@pytest.mark.parametrize("model, prompts", [(DRAFT, EQUALITY_PROMPTS), (TARGET, PAIR_PROMPTS)],
                         ids=["prompt-lookup", "qwen-pair"])
def test_greedy_answers_equal_the_same_server_without_speculation(served, model, prompts):
    """Protects exact greedy output from speculation inside the server, through each of four ways a
    client asks (ollama-python generate and streamed chat, the OpenAI SDK's chat and streamed
    completions). The Qwen pair (its 1.5B target the costliest) runs the two shortest prompts of each
    category: every way still gets two prompts, and /metrics must still show drafts verified."""
    before = drafted(served, model)
    for number, prompt in enumerate(prompts):
        way = number % 4
        standard = answer_text(served, model, prompt["prompt"], way, OFF)
        assert answer_text(served, model, prompt["prompt"], way, None) == standard, (prompt["id"], way)
    tokens, accepted = drafted(served, model)
    assert tokens > before[0] and accepted > before[1], (before, tokens, accepted)  # drafts were verified


def test_an_answer_says_what_speculation_did_and_an_opted_out_one_is_standard(served):
    body = {"model": DRAFT, "prompt": COLOURS, "raw": True, "stream": False,
            "options": {"temperature": 0, "num_predict": 12}}
    speculated = httpx.post(f"{served}/api/generate", json=body, timeout=300).json()
    standard = httpx.post(f"{served}/api/generate", json=body, headers=OFF, timeout=300).json()
    assert speculated["response"] == standard["response"] and speculated["eval_count"] == standard["eval_count"]
    assert speculated["speculative"]["drafter"] == "lookup" and speculated["speculative"]["draft_tokens"] > 0
    assert "speculative" not in standard
    # What speculation cannot serve exactly goes to the server's own generation, unchanged.
    seeded = httpx.post(f"{served}/api/generate", json={**body, "options": {"temperature": 0.7, "seed": 1}},
                        timeout=300).json()
    assert "speculative" not in seeded and seeded["done"] is True
    assert 'reason="option:seed"' in httpx.get(f"{served}/metrics", timeout=30).text


FORMATS = [
    {"type": "object", "required": ["items"], "additionalProperties": False, "properties": {"items": {
        "type": "array", "maxItems": 6, "items": {"type": "object", "required": ["name", "price"], "properties": {
            "name": {"type": "string", "maxLength": 20}, "price": {"type": "number"}}}}}},
    "json",
    {},  # a schema too: any JSON value (not "no format")
]


@pytest.mark.parametrize("shape", FORMATS, ids=["schema", "json", "empty-schema"])
def test_format_answers_are_speculated_equal_to_standard_and_valid(served, shape):
    """`format` in process: each verified row under the grammar state its prefix reaches. Greedy,
    streamed and not, and seeded (passed to the server's own generation): the same text as with
    speculation off, every answer valid; the greedy ones speculated, with drafts accepted."""
    listing = ", ".join(f'{{"name": "item {i}", "price": {i}.5}}' for i in range(4))
    messages = [{"role": "user", "content": f'Copy this exactly: {{"items": [{listing}]}}'}]
    for options, stream in (({"temperature": 0}, False), ({"temperature": 0}, True),
                            ({"temperature": 0.8, "seed": 3}, False)):
        body = {"model": DRAFT, "messages": messages, "format": shape, "stream": stream,
                "options": {**options, "num_predict": 160}}
        texts, finals = [], []
        for headers in (OFF, {}):
            lines = [json.loads(line) for line in httpx.post(f"{served}/api/chat", json=body, headers=headers,
                                                              timeout=600).text.splitlines() if line.strip()]
            texts.append("".join(line["message"]["content"] for line in lines))
            finals.append(lines[-1])
        assert texts[0] == texts[1] and finals[1]["done_reason"] == "stop", texts
        answer = json.loads(texts[1])
        if isinstance(shape, dict):
            jsonschema.validate(answer, shape)
        if "seed" not in options:
            assert finals[1]["speculative"]["accepted_tokens"] > 0, finals[1]


def test_the_engines_events_stream_to_a_client_that_asks_with_its_settings_applied_or_refused(served):
    """What the app gets from `cli.py serve` (utils/proxy/event_stream.py): the engine's events, made in
    the server with the drafter and K the headers ask for, read back by the app's own reader; the text
    is the server's standard answer, the rounds add up to the closing statistics, the answer is counted
    in /metrics, and a header that cannot be honoured is refused with a sentence."""
    import asyncio

    from config import get_settings
    from utils.engine.client import OllamaClient
    from utils.engine.events import DoneEvent, RoundEvent, TextEvent, WireEvents
    from utils.engine.request import GenerationRequest
    from utils.engine.served import ServedDecoder, answer_decoder
    from utils.engine.target import ModelNotFound, RequestRefused

    body = {"model": DRAFT, "prompt": COLOURS, "raw": True, "options": {"temperature": 0, "num_predict": 12}}
    standard = httpx.post(f"{served}/api/generate", json={**body, "stream": False}, headers=OFF, timeout=300).json()

    async def events(headers: dict[str, str], sent: dict | None = None) -> list:
        client, wire = OllamaClient(served), WireEvents()
        try:
            return [wire.read(data) async for data in client.answer_events(False, sent or body, headers)]
        finally:
            await client.aclose()

    async def served_answer(drafter: str, **fields) -> list:  # as the app and the CLI ask (engine/served.py)
        client = OllamaClient(served)
        try:
            decoder = await answer_decoder(get_settings().engine, client, DRAFT, drafter)
            assert isinstance(decoder, ServedDecoder)
            request = GenerationRequest(prompt=COLOURS, raw=True, max_tokens=12, **fields)
            return [event async for event in decoder.stream(request)]
        finally:
            await client.aclose()

    before = drafted(served, DRAFT)
    got = asyncio.run(served_answer("lookup", k=2))
    text = "".join(event.text for event in got if isinstance(event, TextEvent))
    rounds = [event.record for event in got if isinstance(event, RoundEvent)]
    done = got[-1]
    assert isinstance(done, DoneEvent) and text == done.text == standard["response"]
    assert done.stats.drafter == "lookup" and done.stats.drafted_tokens > 0
    assert rounds == done.stats.rounds and max(record.k for record in rounds) == 2  # the K asked, not the server's 4
    assert drafted(served, DRAFT)[0] - before[0] == done.stats.drafted_tokens  # counted in /metrics
    plain = asyncio.run(served_answer("none"))[-1]
    assert plain.text == standard["response"] and plain.stats.mode == "standard" and plain.stats.drafts == 0
    shaped = asyncio.run(served_answer("lookup", format="json"))[-1]  # speculated under the grammar, in process
    own = httpx.post(f"{served}/api/generate", json={**body, "format": "json", "stream": False}, headers=OFF,
                     timeout=300).json()
    assert shaped.text == own["response"] and shaped.stats.mode == "speculative"
    assert not any("format" in fallback.reason for fallback in shaped.stats.fallbacks)

    for headers, sent, kind, words in (({"x-speculation-k": "99"}, None, RequestRefused, "X-Speculation-K"),
                                       ({"x-speculation-p-min": "2"}, None, RequestRefused, "P-Min"),
                                       ({}, {**body, "images": ["aGk="]}, RequestRefused, "images"),
                                       ({}, {**body, "model": "nope:1b"}, ModelNotFound, "not found")):
        with pytest.raises(kind, match=words):
            asyncio.run(events(headers, sent))


def test_the_cli_answers_through_the_servers_engine(served):
    """`cli.py generate` against `cli.py serve` gets its answer made in the server (engine/served.py):
    the same text as the server's standard answer, its drafts verified and counted there."""
    import subprocess
    import sys

    before = drafted(served, DRAFT)
    done = subprocess.run([sys.executable, "cli.py", "generate", "--host", served, "--target", DRAFT, "--draft",
                           "lookup", "--k", "2", "--max-tokens", "12", "--json", "--prompt", COLOURS],
                          cwd=Path(__file__).parents[1], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    body = {"model": DRAFT, "prompt": COLOURS, "raw": True, "stream": False,
            "options": {"temperature": 0, "num_predict": 12}}
    own = httpx.post(f"{served}/api/generate", json=body, headers=OFF, timeout=300).json()
    assert result["text"] == own["response"]
    assert result["stats"]["drafted_tokens"] > 0 and set(result["stats"]["k_history"]) <= {0, 2}
    assert drafted(served, DRAFT)[0] - before[0] == result["stats"]["drafted_tokens"]


def test_sampled_answers_keep_the_target_distribution(served):
    options = SamplingOptions(temperature=1.0, top_k=5, top_p=1.0)
    probe = {"model": DRAFT, "prompt": COLOURS, "raw": True, "stream": False, "logprobs": True, "top_logprobs": 20,
             "options": {"temperature": 0, "num_predict": 1}}
    top = httpx.post(f"{served}/api/generate", json=probe, headers=OFF, timeout=300).json()["logprobs"][0]
    expected = text_distribution({t["token"]: t["logprob"] for t in top["top_logprobs"]}, options)
    runs = 240
    body = {"model": DRAFT, "prompt": COLOURS, "raw": True, "stream": False,
            "options": {"temperature": 1.0, "top_k": 5, "top_p": 1.0, "num_predict": 3}}
    seen, methods, drafts = sampled_first_tokens(served, "/api/generate", body, runs, expected,
                                                 lambda reply: reply["response"])
    assert methods == {"sample-match"} and drafts > 0, (methods, drafts)
    assert_fits(seen, expected, runs)


def test_a_non_streamed_answer_stops_when_its_client_leaves(served):
    """A client that times out on a whole (non-streamed) speculated answer stops it, as Ollama does.
    An unload (keep_alive 0) waits for the answers that hold the model, so once the client has gone
    the model is unloaded when the answer has stopped: polled for, and then the answer must not have
    been completed (the metrics count a speculated answer's tokens when it completes). Ran on, the
    answer would have held the model for its 3,000 tokens and been counted whole."""
    def counted() -> int:  # tokens of the completed speculated answers of DRAFT
        text = httpx.get(f"{served}/metrics", timeout=30).text
        pattern = rf'^spec_proxy_output_tokens_total{{[^}}]*target="{re.escape(DRAFT)}"[^}}]*}} (\d+)'
        return sum(int(value) for value in re.findall(pattern, text, re.M))

    def loaded() -> bool:
        return DRAFT in [model["name"] for model in httpx.get(f"{served}/api/ps", timeout=30).json()["models"]]

    httpx.post(f"{served}/api/generate", json={"model": DRAFT}, timeout=600).raise_for_status()  # loaded first
    before = counted()
    body = {"model": DRAFT, "prompt": COUNTING, "raw": True, "stream": False,
            "options": {"temperature": 0, "num_predict": 3000}}
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{served}/api/generate", json=body, timeout=1.0)
    assert loaded()
    unload = httpx.post(f"{served}/api/generate", json={"model": DRAFT, "keep_alive": 0}, timeout=600)
    assert unload.status_code == 200, unload.text
    deadline = time.monotonic() + 600
    while loaded() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not loaded(), "the model was still held 10 minutes after its client had left"
    assert counted() == before, "the answer ran on after its client had left"


@pytest.fixture(scope="module")
def served_as_started() -> Iterator[str]:
    """`cli.py serve` as a user starts it: the suffix drafter for every model, K chosen by the controller."""
    with EmbeddedServer(speculation=True, args=["--pair", f"{TARGET}=suffix"]) as server:
        yield server.url


def test_a_second_client_gets_its_first_token_while_a_speculated_answer_streams(served_as_started):
    """A client that asks while another answer is being speculated waits for its own prompt, the
    decode in flight (a standard token or a burst of K+1 rows) and its own first token, which is
    standard (`_choose_k`): not for rounds of the other answer. However fast the machine, the other
    answer, read as it streams, has most of its tokens still to come when the second client's first
    token arrives: fewer of its messages arrived while the second client waited than after."""
    url, options = served_as_started, {"temperature": 0, "num_predict": 8}
    colours = ["red", "green", "blue", "black"] * 6
    listing = "\n".join(f"- item {i}: the {colour} box" for i, colour in enumerate(colours))
    copy = f"<|im_start|>user\nCopy this list exactly:\n{listing}<|im_end|>\n<|im_start|>assistant\n"

    def fresh(n: int) -> str:  # nothing of it is cached: its prompt is evaluated whole, as alone
        return (f"<|im_start|>system\nRequest {n}.<|im_end|>\n<|im_start|>user\nName three rivers in Europe."
                "<|im_end|>\n<|im_start|>assistant\n")

    client = ollama.Client(host=url, timeout=600)
    alone = [ollama.Client(host=url, headers=OFF, timeout=600).generate(
        model=TARGET, prompt=fresh(n), raw=True, options=options) for n in range(3)]
    prompt_s = statistics.median(a.prompt_eval_duration for a in alone) / 1e9
    token_s = statistics.median(a.eval_duration / a.eval_count for a in alone) / 1e9
    body = {"model": TARGET, "prompt": copy, "raw": True, "stream": True,
            "options": {"temperature": 0, "num_predict": 200}}
    arrivals: list[tuple[float, dict]] = []  # the first answer's messages as they arrive

    def read_first() -> None:
        with httpx.stream("POST", f"{url}/api/generate", json=body, timeout=600) as response:
            for line in response.iter_lines():
                if line:
                    arrivals.append((time.perf_counter(), json.loads(line)))

    reader = threading.Thread(target=read_first, daemon=True)
    reader.start()
    deadline = time.monotonic() + 600
    while len(arrivals) < 40 and reader.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(arrivals) >= 40, "the first answer did not stream"
    asked = time.perf_counter()
    stream = client.generate(model=TARGET, prompt=fresh(99), raw=True, stream=True, options=options)
    next(stream)
    answered = time.perf_counter()
    list(stream)
    reader.join(timeout=600)
    assert not reader.is_alive()
    final = arrivals[-1][1]
    assert final["done"] and final["speculative"]["accepted_tokens"] > 0  # the first answer was speculated
    during = [message for at, message in arrivals if asked < at <= answered]
    after = [message for at, message in arrivals if at > answered]
    waited = answered - asked
    print(f"second client's first token after {waited * 1e3:.0f} ms (its prompt alone {prompt_s * 1e3:.0f} ms, "
          f"a standard token {token_s * 1e3:.0f} ms); the first answer's messages meanwhile: {len(during)}, "
          f"after: {len(after)}")
    assert len(during) < len(after), (len(during), len(after))
