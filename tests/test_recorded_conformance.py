"""Conformance with a real Ollama 0.32.15: the requests recorded from it (tests/data/ollama-recorded/,
read through tests/support/recorded.py) sent as they are to the embedded server, whose answer must
have the recorded status, media type, field names and JSON types, and the same meaning: `done` and
`done_reason`, the prompt's and the answer's token counts, one logprob entry per generated token with
`token`, `logprob`, `bytes` and as many `top_logprobs` as asked, a streamed answer's last message with
the statistics and no logprobs, the prompt `_debug_render_only` renders. Not equal texts or logprobs
(another build of llama.cpp, another machine).

Where the embedded server answers otherwise, the difference is written in DEVIATIONS below, each
with why: the test fails on a new difference and on a listed one that is gone, so the list stays
what the server does.

tests/test_conformance.py checks the examples of Ollama's API documentation (every endpoint, on
smollm2); this checks what a real Ollama answered to the requests the engine and its clients make
(raw generation with logprobs, `_debug_render_only`, think, a context overflow, /v1 logprobs).

Recordings 18-20 (a model with Modelfile parameters) are checked against the embedded server in
tests/test_model_parameters.py (the same `parameters` text, greedy and stopped by the Modelfile's stop,
`context_length` the Modelfile's num_ctx), on a server of its own since they create a model.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import httpx
import pytest

from tests.support.recorded import Exchange, load, shape_differences, sse_events
from utils.embedded.server import EmbeddedServer
from utils.engine.client import ContextFull, OllamaClient

# The Anthropic Messages and OpenAI Responses APIs (utils/api/anthropic.py, responses.py), plain and
# with a tool, whole and streamed: the same fields, types and event order as Ollama's, and the same
# stop reason, blocks or items and counts (`summary`).
SHAPED = ["29-v1-messages", "30-v1-messages-stream", "31-v1-messages-tools", "32-v1-messages-tools-stream",
          "33-v1-responses", "34-v1-responses-stream", "35-v1-responses-tools", "36-v1-responses-tools-stream"]
# Tool chats of qwen2.5-coder:1.5b, which Ollama renders with its library TEMPLATE and SYSTEM (71), as the
# embedded server renders a bundled model: the same prompt (26's render byte for byte, the others'
# prompt_eval_count) and, greedy, the same bare-JSON answer as content.
TOOL_CHATS = ["22-chat-tools", "23-chat-tools-stream", "24-chat-tools-result", "25-chat-tools-write",
              "26-chat-tools-render-only", "27-v1-chat-tools"]  # 28 (27 streamed): the same prompt
CASES = [
    "01-version", "02-tags", "03-show-qwen2_5-coder_0_5b", "03-show-qwen2_5-coder_1_5b", "03-show-smollm2_135m",
    "04-generate-warmup", "05-generate-raw-logprobs", "06-generate-raw-logprobs-stream",
    "07-generate-raw-logprobs-8tok", "08-chat", "09-chat-debug-render-only", "10-generate-debug-render-only",
    "13-openai-chat-completions", "15-generate-raw-logprobs-qwen2_5-coder_1_5b",
    "15-generate-raw-logprobs-smollm2_135m", "16-generate-raw-think-false", "17-generate-raw-think-true",
    "21-chat-context-full-truncate-false", *SHAPED, *TOOL_CHATS, "71-show-qwen2.5-coder-library-modelfile",
    "14-ps",  # last: after the generations have loaded models
]
# Ollama's details.family and families are the GGUF's architecture (qwen2, llama); the embedded
# server's are the catalogue's names (utils/embedded/http/api.py _model_entry and /api/show).
FAMILIES = {where: [f"{where}.details.families: expected ['llama'], got ['smollm2']",
                    f"{where}.details.families: expected ['qwen2'], got ['qwen2.5-coder']",
                    f"{where}.details.family: expected 'llama', got 'smollm'",
                    f"{where}.details.family: expected 'qwen2', got 'qwen2.5'"] for where in ("", ".models[]")}
QWEN_FAMILY = {where: [line for line in lines if "qwen" in line] for where, lines in FAMILIES.items()}
SHOW_DEVIATIONS = [
    # Ollama 0.32.15 lists the tensors (name, type, shape) in a plain /api/show too.
    ".tensors: expected list, got nothing",
]
DEVIATIONS: dict[str, list[str]] = {
    # By design: the embedded server declares what the engine may use (utils/engine/client.py reads
    # these).
    "01-version": [".batches_nested_requests: expected nothing, got bool",
                   ".burst_endpoint: expected nothing, got bool", ".embedded: expected nothing, got bool",
                   ".exact_logprobs: expected nothing, got bool"],
    # Ollama 0.32.15 lists each model's capabilities and, in its details, the context and embedding
    # lengths; the embedded server's list (utils/embedded/http/api.py _model_entry) has neither.
    "02-tags": [".models[].capabilities: expected list, got nothing",
                ".models[].details.context_length: expected int, got nothing",
                ".models[].details.embedding_length: expected int, got nothing", *FAMILIES[".models[]"]],
    # Ollama has no `parameters` where the model has none (qwen); smollm2 has Ollama's stop strings.
    # `insert` and `system`: the recorded Ollama imported the bare GGUF (TEMPLATE {{ .Prompt }}, no
    # .Suffix, so no fill-in-the-middle; no SYSTEM); the embedded server describes the Ollama library's
    # qwen2.5-coder, which has both (71, where they agree).
    **{name: [".parameters: expected nothing, got str", *SHOW_DEVIATIONS, *QWEN_FAMILY[""],
              ".capabilities: expected ['completion', 'tools'], got ['completion', 'insert', 'tools']",
              ".system: expected nothing, got str"]
       for name in ("03-show-qwen2_5-coder_0_5b", "03-show-qwen2_5-coder_1_5b")},
    "71-show-qwen2.5-coder-library-modelfile": [".parameters: expected nothing, got str", *SHOW_DEVIATIONS,
                                                *QWEN_FAMILY[""]],
    "03-show-smollm2_135m": [*SHOW_DEVIATIONS, *(line for line in FAMILIES[""] if "qwen" not in line)],
    # /v1/chat/completions with logprobs: true, top_logprobs: 3: Ollama gives each choice its logprobs
    # ({"content": [{token, logprob, bytes, top_logprobs}]}); utils/api/openai.py leaves them out.
    "13-openai-chat-completions": [".choices[].logprobs: expected dict, got nothing"],
    "14-ps": QWEN_FAMILY[".models[]"],
    # Ollama 0.32.15 passes llama-server's own JSON on as the text of `error`; the embedded server
    # (utils/embedded/runtime/runner.py) words it as Ollama's Go engine did. The engine's client reads both
    # as ContextFull (test_context_full_is_contextfull_for_the_engine below).
    "21-chat-context-full-truncate-false": [
        ".error: expected llama-server's JSON (exceed_context_size_error), got text"],
    # Ollama 0.32 (llama-server) counts the end-of-turn token among the answer's tokens; the embedded
    # server counts the tokens of the text (as /api/chat's eval_count: the same on every endpoint).
    # The tool chats, whose answers end at the end-of-turn token too (the same texts as Ollama's).
    **{name: [f".output_tokens: expected {3 if 'tools' not in name else 17}, got {2 if 'tools' not in name else 16}"]
       for name in SHAPED},
    **{name: [".eval_count: expected 17, got 16"] for name in ("22-chat-tools", "23-chat-tools-stream")},
    "24-chat-tools-result": [".eval_count: expected 16, got 15"],
    "25-chat-tools-write": [".eval_count: expected 27, got 26"],
    "27-v1-chat-tools": ["usage: {'prompt_tokens': 163, 'completion_tokens': 16, 'total_tokens': 179}"],
}


def media(content_type: str | None) -> str:
    return (content_type or "").split(";")[0].strip()


def read(reply: httpx.Response) -> Any:
    if media(reply.headers.get("content-type")) == "application/x-ndjson":
        return [json.loads(line) for line in reply.text.splitlines() if line.strip()]
    if media(reply.headers.get("content-type")) == "text/event-stream":
        return sse_events(reply.text)
    return reply.json()


def event_shape(expected: list[dict[str, Any]], got: list[dict[str, Any]]) -> list[str]:
    """An event stream: the events' order (a run of deltas as one), and each event's fields and types
    against the first recorded event of its name."""
    def order(events: list[dict[str, Any]]) -> list[str]:
        names = [event["event"] for event in events]
        return [name for i, name in enumerate(names) if i == 0 or name != names[i - 1]]

    got = [event for event in got if event["event"] != "ping"]  # keep-alives, any number anywhere (Anthropic)
    found = [] if order(got) == order(expected) else [f"events: expected {order(expected)}, got {order(got)}"]
    first = {}
    for event in reversed(expected):
        first[event["event"]] = event["data"]
    return found + [d for event in got
                    for d in shape_differences(first.get(event["event"]), event["data"], f"[{event['event']}]")]


def summary(answer: Any) -> dict[str, Any]:
    """What an Anthropic or Responses answer (whole, or its events) says: how it ended, its blocks or
    items, its token counts and, for a Messages stream, the input tokens estimated at its start."""
    if isinstance(answer, list):  # a stream: its closing event, and its blocks or items
        data = {event["event"]: event["data"] for event in answer}
        if "message_delta" in data:
            blocks = [e["data"]["content_block"]["type"] for e in answer if e["event"] == "content_block_start"]
            return {"stop_reason": data["message_delta"]["delta"].get("stop_reason"), "blocks": blocks,
                    "estimated_input_tokens": data["message_start"]["message"]["usage"]["input_tokens"],
                    **data["message_delta"]["usage"]}
        answer = data["response.completed"]["response"]
    if "stop_reason" in answer:
        return {"stop_reason": answer["stop_reason"], "blocks": [block["type"] for block in answer["content"]],
                **answer["usage"]}
    return {"status": answer["status"], "items": [item["type"] for item in answer["output"]],
            "input_tokens": answer["usage"]["input_tokens"], "output_tokens": answer["usage"]["output_tokens"]}


def shape(exchange: Exchange, got: Any) -> list[str]:
    """Field names and types; a stream's messages against the recorded first and last ones."""
    expected = exchange.json()
    ignore = (".model_info",)  # the GGUF's own keys: checked apart (meaning)
    if exchange.content_type.startswith("text/event-stream"):
        return sorted(set(event_shape(expected, got)))
    if isinstance(expected, list) and exchange.content_type.startswith("application/x-ndjson"):
        found = [d for message in got[:-1] for d in shape_differences(expected[0], message, "[chunk]", ignore)]
        return sorted(set(found + shape_differences(expected[-1], got[-1], "[final]", ignore)))
    return shape_differences(expected, got, ignore=ignore)


def logprob_entry(entry: dict[str, Any], top: int) -> list[str]:
    found = []
    if set(entry) != {"token", "logprob", "bytes", "top_logprobs"}:
        found.append(f"logprobs[]: fields {sorted(entry)}")
    if entry.get("logprob", 1) > 0 or len(entry.get("top_logprobs") or []) != top:
        found.append(f"logprobs[]: logprob {entry.get('logprob')}, {len(entry.get('top_logprobs') or [])} top")
    if "\ufffd" not in entry["token"] and entry.get("bytes") != list(entry["token"].encode()):
        found.append(f"logprobs[]: bytes {entry.get('bytes')} of {entry['token']!r}")
    return found


def family(recorded: dict[str, Any] | None, got: dict[str, Any], where: str) -> list[str]:
    """A model's `details.family` and `families`: Ollama's are the GGUF's architecture."""
    if recorded is None:  # a model the recording did not have
        return []
    return [f"{where}.details.{key}: expected {recorded[key]!r}, got {got.get(key)!r}"
            for key in ("family", "families") if got.get(key) != recorded[key]]


def meaning(exchange: Exchange, got: Any) -> list[str]:
    """What the fields say, where they must say the same as Ollama's."""
    expected, request, found = exchange.json(), exchange.request or {}, []
    if exchange.path in ("/api/generate", "/api/chat") and exchange.status == 200:
        chunks = got if isinstance(got, list) else [got]
        final, recorded = chunks[-1], expected[-1] if isinstance(expected, list) else expected
        for key in ("done", "done_reason", "prompt_eval_count", "eval_count"):
            if key in recorded and key in final and final[key] != recorded[key]:  # absent: shape says so
                found.append(f".{key}: expected {recorded[key]!r}, got {final.get(key)!r}")
        if any(c.get("done") or "done_reason" in c for c in chunks[:-1]):
            found.append("a message before the last says done")
        if "_debug_info" in recorded:
            rendered = (final.get("_debug_info") or {}).get("rendered_template")
            if rendered != recorded["_debug_info"]["rendered_template"]:
                found.append("._debug_info.rendered_template: another prompt")
            return found
        entries = [e for c in chunks for e in c.get("logprobs") or []]
        if len(chunks) > 1 and "logprobs" in final:
            found.append("[final].logprobs: expected nothing (Ollama's last message has none)")
        if not request.get("logprobs"):
            return found + (["logprobs: sent though not asked for"] if entries else [])
        if len(entries) != final.get("eval_count"):
            found.append(f"logprobs: {len(entries)} entries for {final.get('eval_count')} tokens")
        found += [d for e in entries for d in logprob_entry(e, request.get("top_logprobs", 0))]
        if "".join(e["token"] for e in entries) != "".join(c.get("response", "") for c in chunks):
            found.append("logprobs: their tokens are not the text")
    elif exchange.path == "/v1/chat/completions":
        choice, recorded = got["choices"][0], expected["choices"][0]
        if (got["object"], choice["finish_reason"]) != (expected["object"], recorded["finish_reason"]):
            found.append(f"object, finish_reason: {got['object']}, {choice['finish_reason']}")
        if got["usage"]["completion_tokens"] != expected["usage"]["completion_tokens"]:
            found.append(f"usage: {got['usage']}")
        entries = (choice.get("logprobs") or {}).get("content") or []
        found += [d for e in entries for d in logprob_entry(e, request["top_logprobs"])]
    elif exchange.path in ("/v1/messages", "/v1/responses"):
        recorded, answered = summary(expected), summary(got)
        found += [f".{key}: expected {value!r}, got {answered.get(key)!r}"
                  for key, value in recorded.items() if answered.get(key) != value]
    elif exchange.status >= 400:
        try:
            inner = json.loads(expected["error"])
        except ValueError:
            if got.get("error") != expected["error"]:
                found.append(f".error: expected {expected['error']!r}, got {got.get('error')!r}")
        else:
            try:
                same = json.loads(got["error"])["error"]["type"] == inner["error"]["type"]
            except (ValueError, KeyError, TypeError):
                same = False
            if not same:
                found.append(f".error: expected llama-server's JSON ({inner['error']['type']}), got text")
    elif exchange.path in ("/api/tags", "/api/ps"):
        recorded_details = {m["model"]: m["details"] for m in expected["models"]}
        for model in got["models"]:
            found += family(recorded_details.get(model.get("model")), model.get("details") or {}, ".models[]")
        if exchange.path == "/api/ps":
            lengths = [m.get("context_length") for m in got["models"]]
            if not lengths or not all(isinstance(n, int) and n > 0 for n in lengths):
                found.append(f".models[].context_length: {lengths}")
    elif exchange.path == "/api/show":
        found += family(expected["details"], got.get("details") or {}, "")
        info = got.get("model_info") or {}
        architecture = info.get("general.architecture")
        if architecture != expected["model_info"]["general.architecture"] or \
                not isinstance(info.get(f"{architecture}.context_length"), int):
            found.append(f".model_info: architecture {architecture!r}")
        if sorted(got.get("capabilities") or []) != sorted(expected["capabilities"]):
            found.append(f".capabilities: expected {sorted(expected['capabilities'])}, "
                         f"got {sorted(got.get('capabilities') or [])}")
        if "system" in expected:  # 71, the library Modelfile: the same template, system and their lines
            found += [f".{key}: another {key}" for key in ("template", "system") if got.get(key) != expected[key]]
            lines = expected["modelfile"].split("\n", 5)[5].rstrip("\n")  # after the comments and FROM
            if not str(got.get("modelfile")).split("\n", 1)[-1].startswith(lines):
                found.append(".modelfile: other TEMPLATE and SYSTEM lines")
    return sorted(set(found))


@pytest.fixture(scope="module")
def http(tmp_path_factory):
    """A server of its own, fresh as the real Ollama was when recorded. The embedded server tokenizes a
    prompt against what the model's cache holds and keeps the model's own tokens where it chose them
    (utils/embedded/runtime/cache.py); on the suite's shared server, in one full run (2b0aa06), the
    recorded "def fibonacci(n):\n    " counted 6 prompt tokens where Ollama counted 5, after whatever
    the tests before had left in qwen2.5-coder:0.5b's cache (alone, and after the proxy tests: 5)."""
    if url := os.environ.get("OLLAMA_HOST_FOR_TESTS"):
        with httpx.Client(base_url=url, timeout=600) as client:
            yield client
        return
    with EmbeddedServer(log_path=tmp_path_factory.mktemp("recorded") / "server.log") as server:
        with httpx.Client(base_url=server.url, timeout=600) as client:
            yield client


def send(http: httpx.Client, exchange: Exchange) -> httpx.Response:
    body = None if exchange.request is None else json.dumps(exchange.request)
    return http.request(exchange.method, exchange.path, content=body)


@pytest.mark.parametrize("name", CASES)
def test_the_embedded_server_answers_as_ollama_did(http, name):
    exchange = load(name)
    if name == "14-ps":  # the model of 14 loaded, whatever ran before
        assert send(http, load("04-generate-warmup")).status_code == 200
    reply = send(http, exchange)
    assert reply.status_code == exchange.status, reply.text
    assert media(reply.headers.get("content-type")) == media(exchange.content_type)
    got = read(reply)
    found = sorted(shape(exchange, got) + meaning(exchange, got))
    assert found == sorted(DEVIATIONS.get(name, [])), json.dumps(got)[:2000]


async def test_a_burst_of_nested_prompts_as_ollama_answered_it(server_url):
    """11: five one-token requests sent at once, prompts extending one another (a validator burst):
    each answered alone as Ollama did, with the whole prompt counted."""
    exchanges = [load(f"11-nested-{i}") for i in range(5)]
    async with httpx.AsyncClient(base_url=server_url, timeout=600) as client:
        replies = await asyncio.gather(*(client.post(e.path, json=e.request) for e in exchanges))
    for exchange, reply in zip(exchanges, replies):
        assert reply.status_code == 200, reply.text
        got = reply.json()
        assert shape(exchange, got) + meaning(exchange, got) == [], (exchange.name, got)


async def test_context_full_is_contextfull_for_the_engine(server_url):
    """21's request through the engine's client: ContextFull, as from a real Ollama (whose 400 the
    fast layer replays in tests/unit/test_recorded_ollama.py)."""
    recorded = load("21-chat-context-full-truncate-false").request
    server = OllamaClient(server_url)
    try:
        with pytest.raises(ContextFull) as raised:
            await server.next_token(recorded["model"], recorded["prompt"], recorded["options"])
    finally:
        await server.aclose()
    assert raised.value.status == 400
