"""The Anthropic Messages and OpenAI Responses translations (utils/api/anthropic.py, responses.py),
without a model: requests into Ollama's chat body as Ollama v0.32.15's middleware makes it, and
Ollama's chat messages into the endpoint's JSON and events. The answers are rebuilt from what the real
Ollama streamed in the recordings 29-36 (its chat chunks: one per text delta, then the counts) and must
come out as Ollama wrote them, event for event, field for field, ids and clocks aside."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.recorded import load, sse_events
from utils.api import anthropic, responses
from utils.api.openai import OpenAIError
from utils.api.shaped_routes import MESSAGES, RESPONSES
from utils.engine.planning import NO_THINKING_REASON

MODEL = "qwen2.5-coder:1.5b"
CALL = {"id": "call_abc", "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}}


def chunks(texts: list[str], final: dict[str, Any], **message: Any) -> list[dict[str, Any]]:
    """Ollama's chat stream: a message per text, then the closing one."""
    out = [{"model": MODEL, "message": {"role": "assistant", "content": text}, "done": False} for text in texts]
    return out + [{"model": MODEL, "message": {"role": "assistant", "content": "", **message}, "done": True,
                   "done_reason": "stop", **final}]


def streamed(reply: Any, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    async def source() -> AsyncIterator[dict[str, Any]]:
        for message in messages:
            yield message

    async def run() -> bytes:
        return b"".join([event async for event in reply.sse(source())])

    return sse_events(asyncio.run(run()).decode())


def without(value: Any, keys: set[str]) -> Any:
    """`value` with the fields named in `keys` left out, everywhere (ids and clocks)."""
    if isinstance(value, dict):
        return {k: without(v, keys) for k, v in value.items() if k not in keys}
    return [without(item, keys) for item in value] if isinstance(value, list) else value


VARYING = {"id", "item_id", "created_at", "completed_at"}


def recorded_stream(name: str) -> tuple[dict[str, Any], list[dict[str, Any]], list[str], dict[str, int]]:
    """A recorded stream's request, events, text deltas and final counts."""
    exchange = load(name)
    events = exchange.json()
    texts = [e["data"]["delta"]["text"] if e["event"] == "content_block_delta" else e["data"]["delta"]
             for e in events if e["event"] in ("content_block_delta", "response.output_text.delta")]
    usage = next(e["data"].get("usage") or e["data"]["response"]["usage"] for e in events
                 if e["event"] in ("message_delta", "response.completed"))
    return exchange.request or {}, events, texts, {"prompt_eval_count": usage["input_tokens"],
                                                   "eval_count": usage["output_tokens"]}


@pytest.mark.parametrize("name", ["30-v1-messages-stream", "32-v1-messages-tools-stream"])
def test_an_anthropic_stream_is_ollamas_event_for_event(name):
    request, events, texts, final = recorded_stream(name)
    got = streamed(anthropic.Reply(MODEL, request), chunks(texts, final))
    assert without(got, VARYING) == without(events, VARYING)
    assert got[0]["data"]["message"]["id"].startswith("msg_") and len(got[0]["data"]["message"]["id"]) == 28


@pytest.mark.parametrize("name", ["34-v1-responses-stream", "36-v1-responses-tools-stream"])
def test_a_responses_stream_is_ollamas_event_for_event(name):
    request, events, texts, final = recorded_stream(name)
    got = streamed(responses.Reply(MODEL, request), chunks(texts, final))
    assert without(got, VARYING) == without(events, VARYING)
    assert [json.dumps(e["data"]) for e in got] == [json.dumps(e["data"], sort_keys=True) for e in got]  # Go's maps


@pytest.mark.parametrize("name,shape", [("29-v1-messages", MESSAGES), ("31-v1-messages-tools", MESSAGES),
                                        ("33-v1-responses", RESPONSES), ("35-v1-responses-tools", RESPONSES)])
def test_a_whole_answer_is_ollamas_field_for_field(name, shape):
    exchange = load(name)
    expected = exchange.json()
    text = expected["content"][0]["text"] if "content" in expected else expected["output"][0]["content"][0]["text"]
    usage = expected["usage"]
    final = chunks([], {"prompt_eval_count": usage["input_tokens"], "eval_count": usage["output_tokens"]})[-1]
    got = shape.reply(MODEL, exchange.request).whole(text, final)
    assert without(got, VARYING) == without(expected, VARYING)
    assert list(got) == list(expected)  # the Go structs' field order


def test_anthropic_requests_become_ollamas_chat():
    body = anthropic.chat_body({
        "model": MODEL, "max_tokens": 64, "temperature": 0.2, "top_p": 0.9, "top_k": 5, "stop_sequences": ["END"],
        "system": [{"type": "text", "text": "Be brief. "}, {"type": "text", "text": "Use tools."}],
        "thinking": {"type": "enabled", "budget_tokens": 1024}, "tool_choice": {"type": "auto"}, "stream": True,
        "tools": [{"name": "get_weather", "description": "Weather.",
                   "input_schema": {"properties": {"city": {"type": "string", "title": "City"}}, "type": "object"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Paris? "}, {"type": "text", "text": "Now."},
                                         {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                      "data": "aGk="}}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "Look it up.", "signature": "s"},
                                              {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                               "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                          "content": [{"type": "text", "text": "14 C"}]},
                                         {"type": "text", "text": "And tomorrow?"}]}]})
    assert body == {
        "model": MODEL, "stream": True, "think": True,
        "options": {"num_predict": 64, "temperature": 0.2, "top_p": 0.9, "top_k": 5, "stop": ["END"]},
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}}}}],  # Ollama's fields, in its order
        "messages": [
            {"role": "system", "content": "Be brief. Use tools."},
            {"role": "user", "content": "Paris? Now.", "images": ["aGk="]},
            {"role": "assistant", "content": "", "thinking": "Look it up.", "tool_calls": [
                {"id": "toolu_1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": "14 C", "tool_call_id": "toolu_1"},  # the result before the user's text
            {"role": "user", "content": "And tomorrow?"}]}
    assert anthropic.chat_body({"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": "x"}],
                                "output_config": {"effort": "xhigh"}})["think"] == "high"
    assert "think" not in anthropic.chat_body({"model": MODEL, "max_tokens": 1, "messages": [{"role": "user",
                                                                                               "content": "x"}]})


@pytest.mark.parametrize("body,message", [
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, "model is required"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "x"}]}, "max_tokens is required and must be positive"),
    ({"model": MODEL, "max_tokens": 5, "messages": []}, "messages is required"),
    ({"model": MODEL, "max_tokens": 5, "messages": [{"role": "assistant", "content": [{"type": "tool_use"}]}]},
     "tool_use block missing required 'id' field"),
    ({"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "http://x"}}]}]},
     "invalid image source type: url. Only base64 images are supported."),
])
def test_anthropic_refuses_what_ollama_refuses(body, message):
    with pytest.raises(anthropic.AnthropicError, match=f"^{message}$".replace("(", r"\(").replace(".", r"\.")):
        anthropic.chat_body(body)
    error = anthropic.error_body(400, message)
    assert error["type"] == "error" and error["error"] == {"type": "invalid_request_error", "message": message}


def test_thinking_asked_of_a_model_without_it_is_relaxed_for_anthropic_only():
    chat = {"model": MODEL, "messages": [], "think": True}
    assert anthropic.relaxed(chat, f'"{MODEL}" does not support thinking') == {"model": MODEL, "messages": []}
    assert anthropic.relaxed(chat, "model not found") is None
    assert RESPONSES.relax(chat, f'"{MODEL}" does not support thinking') is None


def test_claude_codes_effort_is_relaxed_where_a_speculating_front_would_pass_it_on():
    """Claude Code's every request: `effort: "high"` is `think: "high"` (anthropic.go); where the model
    cannot think, the front's reason for passing it on to be refused relaxes it as the refusal does."""
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}],
            "output_config": {"effort": "high"}, "thinking": {"type": "adaptive"}}
    chat = anthropic.chat_body(body)
    assert chat["think"] == "high"
    relaxed = anthropic.relaxed(chat, NO_THINKING_REASON.format(model=MODEL))
    assert relaxed == {key: value for key, value in chat.items() if key != "think"}


def test_responses_requests_become_ollamas_chat():
    body = responses.chat_body({
        "model": MODEL, "instructions": "Be brief.", "max_output_tokens": 50, "top_p": 0.5,
        "reasoning": {"effort": "minimal"}, "text": {"format": {"type": "json_schema", "name": "w", "schema": {
            "type": "object"}}}, "tool_choice": "auto", "store": True,
        "tools": [{"type": "function", "name": "get_weather", "description": None, "strict": None,
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
                  {"type": "namespace", "name": "fs",
                   "tools": [{"type": "function", "name": "read", "parameters": {}}]}],
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Paris?"}]},
            {"type": "reasoning", "encrypted_content": "Look it up."},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "14 C"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "14 C."}]},
            {"role": "user", "content": "Tomorrow?"}]})
    assert body == {
        "model": MODEL, "stream": False, "think": "low", "format": {"type": "object"},
        "options": {"temperature": 1.0, "top_p": 0.5, "num_predict": 50},  # temperature 1 unless given
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
                      "type": "object", "properties": {"city": {"type": "string"}}}}},
                  {"type": "function",
                   "function": {"name": "fs.read", "parameters": {"type": "", "properties": None}}}],
        "messages": [
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Paris?"},
            {"role": "assistant", "content": "", "thinking": "Look it up.", "tool_calls": [
                {"id": "call_1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": "14 C", "tool_call_id": "call_1"},
            {"role": "assistant", "content": "14 C."}, {"role": "user", "content": "Tomorrow?"}]}


@pytest.mark.parametrize("source,message", [
    ([{"content": "x"}], "input[0]: input item missing required 'type' field"),
    ([{"type": "item_reference", "id": "x"}], 'input[0]: unknown input item type: "item_reference"'),
    ([{"role": "user", "content": [{"type": "input_audio"}]}],
     "input[0]: content[0]: unknown content type: input_audio"),
    ([{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}],
     "file inputs are not currently supported"),
    ([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{"}], "failed to parse function call"),
    (42, "input must be a string or array"),
])
def test_responses_refuses_what_ollama_refuses(source, message):
    with pytest.raises(OpenAIError, match=message.replace("[", r"\[").replace("]", r"\]")):
        responses.chat_body({"model": MODEL, "input": source})


def test_tool_calls_and_thinking_are_blocks_and_items():
    final = {"prompt_eval_count": 10, "eval_count": 4}
    answer = chunks([], final, thinking="Hmm.", tool_calls=[CALL])
    whole = anthropic.Reply(MODEL, {}).whole("", answer[-1])
    assert whole["content"] == [{"type": "thinking", "thinking": "Hmm."}, {
        "type": "tool_use", "id": "call_abc", "name": "get_weather", "input": {"city": "Paris"}}]
    assert whole["stop_reason"] == "tool_use"
    events = streamed(anthropic.Reply(MODEL, {}), [{"model": MODEL, "message": {"thinking": "Hmm."}}, *answer[-1:]])
    assert [(e["event"], e["data"].get("index")) for e in events] == [
        ("message_start", None), ("content_block_start", 0), ("content_block_delta", 0), ("content_block_delta", 0),
        ("content_block_stop", 0), ("content_block_start", 1), ("content_block_delta", 1),
        ("content_block_stop", 1), ("message_delta", None), ("message_stop", None)]
    assert events[6]["data"]["delta"] == {"type": "input_json_delta", "partial_json": '{"city":"Paris"}'}
    reply = responses.Reply(MODEL, {})
    output = reply.whole("", answer[-1])["output"]
    assert [item["type"] for item in output] == ["reasoning", "function_call"]
    assert output[1] == {"id": f"fc_{reply.id}_0", "type": "function_call", "status": "completed",
                         "call_id": "call_abc", "name": "get_weather", "arguments": '{"city":"Paris"}'}
    events = streamed(responses.Reply(MODEL, {}), answer)
    assert [e["event"] for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert [item["type"] for item in events[-1]["data"]["response"]["output"]] == ["reasoning", "function_call"]


def test_a_failure_mid_stream_is_the_endpoints_error_event():
    failed = [{"model": MODEL, "message": {"content": "Bon"}, "done": False}, {"error": "the model crashed"}]
    events = streamed(anthropic.Reply(MODEL, {}), failed)
    assert events[-1] == {"event": "error", "data": {"type": "error", "error": {
        "type": "api_error", "message": "the model crashed"}}}
    events = streamed(responses.Reply(MODEL, {}), failed)
    assert events[-1]["event"] == "error" and events[-1]["data"]["message"] == "the model crashed"
    stop = chunks(["x"], {})[-1] | {"done_reason": "length"}
    assert anthropic.Reply(MODEL, {}).whole("x", stop)["stop_reason"] == "max_tokens"
