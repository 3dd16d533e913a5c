"""Tool calls parsed out of an answer as Ollama 0.32.15 parses them (utils/tool_calls.py): the cases of
Ollama's tools/tools_test.go, how its chat handler streams them, and conformance with the recorded
exchanges 22-28 (qwen2.5-coder:1.5b's bare-JSON calls come back as content); which models Ollama
parses otherwise; the OpenAI translation of tool calls and a chat fitted into a context."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.recorded import load
from utils.api import openai
from utils.embedded.http.chat_prompt import fit_messages
from utils.tool_calls import (
    ToolCallParser,
    ToolCallStream,
    builtin_parser_reason,
    find_arguments,
    ollama_answer,
    ollama_chunks,
)

NAMES = ["get_temperature", "get_conditions", "say_hello", "say_hello_world", "get_address", "add"]
TOOLS = [{"type": "function", "function": {"name": name}} for name in NAMES]
QWEN, DEEPSEEK, JSON, MISTRAL, LIST = "<tool_call>", "<|tool▁calls▁begin|>", "{", "[TOOL_CALLS] [", "["
LONDON = {"city": "London", "format": "fahrenheit"}
TOKYO = {"location": "Tokyo"}
SAY = '<tool_call>{"name": "say_hello'

# tools_test.go TestParser: (tag, pieces, content, calls as (name, arguments)), case for case.
PARSER_CASES = [
    (QWEN, ["Hello, how can I help you today?"], "Hello, how can I help you today?", []),
    (QWEN, [""], "", []),
    (QWEN, ['<tool_call>{"name": "get_conditions", "arguments": {"location": "San Francisco"}}</tool_call>'], "",
     [("get_conditions", {"location": "San Francisco"})]),
    (QWEN, ['<tool_call>{"name": "get_conditions", "arguments": {}}</tool_call>'], "", [("get_conditions", {})]),
    (QWEN, ['Let me check the weather. <tool_call>{"name": "get_temperature", "arguments": {"city": "New York"}}'
            '</tool_call>'], "Let me check the weather. ", [("get_temperature", {"city": "New York"})]),
    (QWEN, ["Let me say hello to the user. I'll use the say_hello tool. "],
     "Let me say hello to the user. I'll use the say_hello tool. ", []),
    (MISTRAL, ['[TOOL_CALLS] [{"name": "get_temperature", "arguments": {"city": "London", "format": "fahrenheit"}}, '
               '{"name": "get_conditions", "arguments": {"location": "Tokyo"}}][/TOOL_CALLS]'], "",
     [("get_temperature", LONDON), ("get_conditions", TOKYO)]),
    (QWEN, ['Okay, let\'s call both tools! <tool_call>{"name": "get_temperature", "arguments": {"city": "London", '
            '"format": "fahrenheit"}}</tool_call><tool_call>{"name": "get_conditions", "arguments": {"location": '
            '"Tokyo"}}</tool_call>'], "Okay, let's call both tools! ",
     [("get_temperature", LONDON), ("get_conditions", TOKYO)]),
    (QWEN, ['Let me say hello and check the weather. <tool_call>{"name": "say_hello", "arguments": {}}</tool_call>'
            '<tool_call>{"name": "get_temperature", "arguments": {"city": "London", "format": "fahrenheit"}}'
            '</tool_call>'], "Let me say hello and check the weather. ",
     [("say_hello", {}), ("get_temperature", LONDON)]),
    (QWEN, ['Let me check the weather. <tool_call>{"name": "get_conditions", "arguments": {}}</tool_call><tool_call>'
            '{"name": "get_conditions", "arguments": {"location": "Tokyo"}}'], "Let me check the weather. ",
     [("get_conditions", {}), ("get_conditions", TOKYO)]),
    (DEEPSEEK, ["<think>Wait, I need to call a tool</think><|tool▁calls▁begin|><|tool▁call▁begin|>function<|tool▁sep|>"
                "get_temperature\n```json\n{\"city\": \"Tokyo\"}\n```<|tool▁call▁end|><|tool▁calls▁end|>"
                "<|end▁of▁sentence|>"], "<think>Wait, I need to call a tool</think>",
     [("get_temperature", {"city": "Tokyo"})]),
    (DEEPSEEK, ["<think>Wait", ", I need", " to call", " a tool</think><|too", "l▁calls▁begin", "|>",
                "<|tool▁call▁begin|>function<|tool▁sep|>get_temperature\n", "```json\n", "{\"city\": \"Tokyo\"}\n",
                "```", "<|tool▁c", "all▁end|>", "<|tool▁calls▁end|>", "<|end▁of▁sentence|>"],
     "<think>Wait, I need to call a tool</think>", [("get_temperature", {"city": "Tokyo"})]),
    (JSON, ["{", '"name": "get_temperature",', '"arguments": {', '"city": "Tokyo"', "}", "}"], "",
     [("get_temperature", {"city": "Tokyo"})]),
    (JSON, ["{", '"name": "get_temperature",', '"arguments": {'], "", []),
    (JSON, ["{", '"name": "search", ', '"arguments": {', '"query": "What is the capital of Canada?"', "}", "}"],
     '{"name": "search", "arguments": {"query": "What is the capital of Canada?"}}', []),
    (JSON, ['{"name": "jeff"}', '{"name": "get_conditions", "arguments": {"location": "San Francisco"}}'],
     '{"name": "jeff"}{"name": "get_conditions", "arguments": {"location": "San Francisco"}}', []),
    (JSON, ['{"name": "jeff"} {', '"name": "get_conditions", "arguments": {"location": "San Francisco"}}'],
     '{"name": "jeff"} {"name": "get_conditions", "arguments": {"location": "San Francisco"}}', []),
    (JSON, ['for { fmt.Println("hello") }'], 'for { fmt.Println("hello") }', []),
    (LIST, ["[", "{", '"name": "get_temperature", ', '"arguments": {', '"city": "London"', "}", "},", "{",
            '"name": "get_conditions", ', '"arguments": {', '"location": "Tokyo"', "}", "}]"], "",
     [("get_temperature", {"city": "London"}), ("get_conditions", TOKYO)]),
    (LIST, ["[{", '"name": "get_conditions", ', '"arguments": {', '"location": "Tokyo"', "}", "}"], "",
     [("get_conditions", TOKYO)]),
    (LIST, ["[", "{", '"name": "search", ', '"arguments": {', '"query": "What is the capital of Canada?"', "}", "}"],
     "", []),
    (LIST, ["[", "{", '"name": "get_conditions", ', '"arguments": {', '"location": "Tokyo"', "}", "}", "]", "]"], "",
     [("get_conditions", TOKYO)]),
    (LIST, ["[special", " del", "ivery]"], "[special delivery]", []),
    (QWEN, ["<tool_call>", "{", '"name": "say_hello', '_world",', '"arguments": {}}', "}"], "",
     [("say_hello_world", {})]),
    (QWEN, ["<tool_call>", "{", '"name": "say_hello', '_world",', '"arguments": {}}', "</tool_call>", "<tool_call>",
            "{", '"name": "say_hello', '",', '"arguments": {}}', "</tool_call>"], "",
     [("say_hello_world", {}), ("say_hello", {})]),
    (QWEN, [SAY], "", []),
    (QWEN, [SAY + '", "arguments": {}}</tool_call><tool_call>{"name": "say_hello_world", "arguments": {}}'], "",
     [("say_hello", {}), ("say_hello_world", {})]),
    (QWEN, [SAY + '", "arguments": {}}</tool_call>'], "", [("say_hello", {})]),
    (QWEN, [SAY + '_world", "arguments": {}}</tool_call>'], "", [("say_hello_world", {})]),
    (JSON, ["{", '"name": "get_address",', '"arguments": {', '"location": "London"', "}", "}"], "",
     [("get_address", {"location": "London"})]),
    (QWEN, ['<tool_call>{"name": "get_address", "arguments": {"location": "London"}}</tool_call>'], "",
     [("get_address", {"location": "London"})]),
    (QWEN, ['<tool_call>{"arguments": {"a": "5", "b": "10"}, "name": "add"}</tool_call>'], "",
     [("add", {"a": "5", "b": "10"})]),
]


@pytest.mark.parametrize(("tag", "pieces", "content", "calls"), PARSER_CASES)
def test_ollamas_parser_cases(tag, pieces, content, calls):
    parser = ToolCallParser(tag, TOOLS)
    got_content, got_calls = "", []
    for piece in pieces:
        found, text = parser.add(piece)
        got_calls += found
        got_content += text
    assert got_content == content
    assert got_calls == [{"function": {"index": i, "name": name, "arguments": args}}
                         for i, (name, args) in enumerate(calls)]


@pytest.mark.parametrize(("tool", "buffer", "want"), [  # tools_test.go TestFindArguments, a selection
    ("", "   \n\t  ", None),
    ("", '{"format": "fahrenheit", "location": "San Francisco"', None),
    ("", '{"format": "fahrenheit"}}', {"format": "fahrenheit"}),
    ("", '{format: fahrenheit, location: "San Francisco"}', None),
    ("", '[tool]get_temperature[args]{"format": "fahrenheit"}[end]', {"format": "fahrenheit"}),
    ("", 'get_temperature({"location": "San Francisco, CA"})', {"location": "San Francisco, CA"}),
    ("", '"arguments": {"location": "Tokyo"}}</tool_call>', {"location": "Tokyo"}),
    ("", '{"name": "test", "arguments": {"query": "find } in text"}} {"name": "other"}', {"query": "find } in text"}),
    ("", '{"name": "test", "arguments": {"text": "Unicode: \\u007B and \\u007D"}}', {"text": "Unicode: { and }"}),
    ("", '{"name": "batch", "arguments": ["item1", "{\\"nested\\": true}"]}', None),  # not an object: no call
    ("", '{"name": "path", "arguments": {"dir": "C:\\\\Program Files\\\\{App}\\\\"}}',
     {"dir": "C:\\Program Files\\{App}\\"}),
    ("", '{"name": "test", "arguments": {"data": "some {"', None),
    ("", '{"name": "g", "arguments": "{\\"format\\": \\"fahrenheit\\"}"}', {"format": "fahrenheit"}),
    ("", '{"name": "g", "parameters": "{\\"format\\": \\"fahrenheit\\"}"}', {"format": "fahrenheit"}),
    ("get_temperature", '{"get_temperature": {"format": "fahrenheit"}}', {"format": "fahrenheit"}),
    ("get_temperature", '{"get_temperature": "{\\"format\\": \\"fahrenheit\\"}"}', {"format": "fahrenheit"}),
    ("", '{"name": "n", "arguments": {"a": 1.0, "b": 2.5, "c": 18446744073709551617}}',  # Go's float64 numbers
     {"a": 1, "b": 2.5, "c": 18446744073709551616}),
])
def test_ollamas_find_arguments_cases(tool, buffer, want):
    assert find_arguments(tool, buffer)[0] == want


def test_what_is_left_at_the_end_and_when_a_brace_parser_stops():
    # tools_test.go TestContent: only a "{" or "[" parser that found no call gives its buffer back.
    for tag, buffer, n, want in [("{", "", 0, ""), ("<tool_call>", '<tool_call>{"name": "get_temperature"', 0, ""),
                                 ("{", '{"hello": "world"}', 0, '{"hello": "world"}'), ("{", '{"a": 1}', 1, ""),
                                 ("[", '[{"name": "x"}]', 0, '[{"name": "x"}]')]:
        parser = ToolCallParser(tag, TOOLS)
        parser.buffer, parser.n = buffer, n
        assert parser.content() == want
    # TestDone: a balanced pair outside strings ends a "{" or "[" parser.
    for tag, buffer, want in [("<tool_call>", "", False), ("{", '{"name": "get_weather"', False),
                              ("{", '{"name": "get_weather"}', True), ("{", "{}", True), ("[", "[]", True),
                              ("{", '{"note": "a}b"', False), ("{", '{"note": "a}b"}', True),
                              ("[", '[{"note": "x]y"}', False)]:
        parser = ToolCallParser(tag, TOOLS)
        parser.buffer = buffer
        assert parser._closed() is want


def test_how_ollama_streams_a_tool_answer():
    # A possible start of the tag is held, and sent when it turns out not to be one.
    assert ollama_chunks(QWEN, TOOLS, ["Hi <", "tool", "box>", " ok"]) == [("Hi ", []), ("<toolbox>", []),
                                                                         (" ok", []), ("", [])]
    # Text from the tag on is never content: a call goes out alone, the rest is swallowed.
    chunks = ollama_chunks(QWEN, TOOLS, ["Sure.", "<tool_call>", '{"name": "add", ', '"arguments": {"a": 1}}',
                                         "</tool_call>", " Done."])
    assert [content for content, _ in chunks] == ["Sure.", "", ""]
    assert chunks[1][1][0]["function"] == {"index": 0, "name": "add", "arguments": {"a": 1}}
    assert re.fullmatch(r"call_[a-z0-9]{8}", chunks[1][1][0]["id"]) and list(chunks[1][1][0]) == ["id", "function"]
    # Content and a call completed by one piece: the message carries the content and the call is lost.
    whole = ollama_answer(QWEN, TOOLS, ['Sure. <tool_call>{"name": "add", "arguments": {}}</tool_call>'])
    assert whole == ("Sure. ", [])
    # A tag that never completes is lost at the end; a "{" parser's unfinished JSON is sent with `done`.
    assert ollama_chunks(QWEN, TOOLS, ["Hi", " <tool"]) == [("Hi", []), (" ", []), ("", [])]
    assert ollama_chunks(JSON, TOOLS, ['{"name": "add"', ', "x": 1']) == [('{"name": "add", "x": 1', [])]
    stream = ToolCallStream(QWEN, TOOLS)
    assert stream.step('<tool_call>{"name": "add", "arguments": null}') is None  # not a call, never one
    assert stream.finish() == ("", [])


def recorded_answer(name: str) -> tuple[list[str], list[tuple[str, list]]]:
    """A recorded streamed answer's pieces (one per message but the last) and its messages' (content, calls)."""
    exchange = load(name)
    if exchange.path.startswith("/v1/"):
        events = [json.loads(line[6:]) for line in exchange.body.decode().splitlines()
                  if line.startswith("data: {")]
        deltas = [event["choices"][0]["delta"] for event in events]
        sent = [(delta.get("content", ""), delta.get("tool_calls", [])) for delta in deltas]
        assert events[-1]["choices"][0]["finish_reason"] == "stop"
    else:
        messages = exchange.json()
        sent = [(m["message"]["content"], m["message"].get("tool_calls", [])) for m in messages]
        assert messages[-1]["done"] and messages[-1]["done_reason"] == "stop"
    return [content for content, _ in sent[:-1]], sent


@pytest.mark.parametrize("name", ["23-chat-tools-stream", "25-chat-tools-write", "28-v1-chat-tools-stream"])
def test_recorded_streamed_tool_answers_come_out_message_for_message(name):
    pieces, sent = recorded_answer(name)
    assert "".join(pieces).startswith('{"name": ') and not any(calls for _, calls in sent)
    tools = load(name).request["tools"]
    assert ollama_chunks(QWEN, tools, pieces) == sent  # <tool_call>: the library template's tag


@pytest.mark.parametrize("name", ["22-chat-tools", "24-chat-tools-result", "27-v1-chat-tools"])
def test_recorded_whole_tool_answers(name):
    exchange = load(name)
    body = exchange.json()
    message = body["choices"][0]["message"] if "choices" in body else body["message"]
    assert "tool_calls" not in message and message["content"].startswith('{"name": "get_weather"')
    pieces = re.findall(r'\w+|[^\w]', message["content"])  # its pieces are not recorded: any split will do
    content, calls = ollama_answer(QWEN, exchange.request["tools"], pieces)
    assert (content, calls) == (message["content"], [])
    if "choices" in body:  # the OpenAI layer over it: content and finish_reason "stop", as recorded
        reply = openai.Reply("m", chat=True).whole(content, {"message": {"content": content}, "done_reason": "stop"})
        assert reply["choices"][0]["message"] == message and reply["choices"][0]["finish_reason"] == "stop"


def test_which_models_ollama_parses_with_something_else():
    go = {"template": "{{ if .ToolCalls }}<tool_call>{{ end }}", "modelfile": "FROM x\nTEMPLATE \"\"\"...\"\"\"\n",
          "details": {"family": "qwen2"}}
    assert builtin_parser_reason(go) is None
    coder = {**go, "modelfile": "FROM x\nRENDERER qwen3-coder\nPARSER qwen3-coder\n"}
    assert "qwen3-coder" in builtin_parser_reason(coder)
    harmony = {**go, "template": "<|start|>{{ .Content }}<|end|>", "details": {"family": "gptoss"}}
    assert "harmony" in builtin_parser_reason(harmony)
    jinja = load("03-show-qwen2_5-coder_1_5b").json()  # created FROM the GGUF alone: llama-server parses
    assert "llama-server" in builtin_parser_reason(jinja)


def test_openai_tool_calls_go_both_ways():
    ollama_calls = [{"id": "call_1", "function": {"index": 0, "name": "add", "arguments": {"a": 1}}}]
    converted = openai.openai_tool_calls(ollama_calls)
    assert converted == [{"id": "call_1", "index": 0, "type": "function",
                          "function": {"name": "add", "arguments": json.dumps({"a": 1})}}]
    body = openai.chat_body({"model": "m", "messages": [
        {"role": "user", "content": "1+1"},
        {"role": "assistant", "content": None, "tool_calls": converted},
        {"role": "tool", "content": "2", "tool_call_id": "call_1"}]})
    assert body["messages"][1]["tool_calls"] == [{"id": "call_1", "function": {"name": "add", "arguments": {"a": 1}}}]
    assert body["messages"][2] == {"role": "tool", "content": "2", "tool_call_id": "call_1"}
    reply = openai.Reply("m", chat=True)
    whole = reply.whole("", {"message": {"role": "assistant", "content": "", "tool_calls": ollama_calls},
                             "done_reason": "stop"})
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    assert whole["choices"][0]["message"]["tool_calls"] == converted
    assert openai.error_type(404) == "not_found_error" and openai.error_type(500) == "api_error"


def test_a_chat_keeps_its_system_message_and_the_newest_turns_that_fit():
    messages = [{"role": "system", "content": "S"}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn{i} " * 10} for i in range(20)]

    def render(kept):
        return "".join(f"<{m['role']}>{m['content']}" for m in kept)

    count = lambda text: len(text.split())  # noqa: E731 - a word is a token here
    prompt, dropped = fit_messages(messages, render, count, num_ctx=80)
    assert prompt.startswith("<system>S") and prompt.endswith(render(messages[-1:]))
    assert count(prompt) <= 80 - 80 // 4
    kept = 20 - dropped
    assert kept >= 1 and render([messages[0]] + messages[-kept:]) == prompt
    assert messages[-kept]["role"] == "user"  # the kept turns begin with a question
    assert count(render([messages[0]] + messages[-kept - 2:])) > 60  # one more turn would not have fitted
    assert fit_messages(messages[:3], render, count, num_ctx=4096) == (render(messages[:3]), 0)
