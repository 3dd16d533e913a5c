"""Tool calls parsed out of streamed text, the OpenAI translation of them, and a chat fitted into a
context: the pure parts of the embedded server's tools and long-chat support."""

from __future__ import annotations

import json

from utils.api import openai
from utils.embedded.http.chat_prompt import fit_messages
from utils.embedded.http.tools import ToolCallParser

NAMES = {"get_weather", "add"}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def run(parser: ToolCallParser, text: str, step: int) -> tuple[list[str], list[dict]]:
    """Feed `text` in pieces of `step` characters: what came out as content, and the calls."""
    content, calls = [], []
    for i in range(0, len(text), step):
        out, found = parser.feed(text[i:i + step])
        content.append(out)
        calls += found
    out, found = parser.flush()
    return content + [out], calls + found


def test_a_tagged_call_never_leaks_into_the_content_whatever_the_pieces():
    text = "Let me check." + CALL + "\nDone."
    for step in (1, 2, 3, 7, len(text)):
        content, calls = run(ToolCallParser(NAMES), text, step)
        assert "".join(content) == "Let me check.\nDone."
        assert not any("<" in piece or "tool" in piece for piece in content)
        assert [c["function"]["name"] for c in calls] == ["get_weather"]
        assert calls[0]["function"]["arguments"] == {"city": "Paris"} and calls[0]["function"]["index"] == 0


def test_several_calls_are_numbered_and_an_unclosed_last_one_is_still_read():
    text = CALL + "\n" + CALL.replace("Paris", "Rome").removesuffix("</tool_call>")
    _, calls = run(ToolCallParser(NAMES), text, 5)
    assert [c["function"]["arguments"]["city"] for c in calls] == ["Paris", "Rome"]
    assert [c["function"]["index"] for c in calls] == [0, 1]


def test_a_block_that_is_not_a_call_comes_back_as_content():
    text = "a<tool_call>not json</tool_call>b"
    content, calls = run(ToolCallParser(NAMES), text, 4)
    assert "".join(content) == text and not calls


def test_a_bare_or_fenced_call_naming_a_tool_is_a_call_and_other_json_is_content():
    fenced = '```json\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n```'
    content, calls = run(ToolCallParser(NAMES), fenced, 3)
    assert "".join(content) == "" and calls[0]["function"] == {"index": 0, "name": "add", "arguments": {"a": 1, "b": 2}}
    bare = '[{"name": "add", "arguments": "{\\"a\\": 1}"}]'  # arguments as a JSON string, in a list
    _, calls = run(ToolCallParser(NAMES), bare, 2)
    assert calls[0]["function"]["arguments"] == {"a": 1}
    doubled = '{{"name": "add", "arguments": {"a": 1}}}'  # as qwen2.5-coder:1.5b's own template writes it
    _, calls = run(ToolCallParser(NAMES), doubled, 5)
    assert calls[0]["function"]["arguments"] == {"a": 1}
    other = '{"name": "unknown_tool", "arguments": {}}'
    content, calls = run(ToolCallParser(NAMES), other, 4)
    assert "".join(content) == other and not calls
    prose = "The weather is fine."
    content, calls = run(ToolCallParser(NAMES), prose, 1)
    assert "".join(content) == prose and not calls
    assert content[0] == "T"  # prose streams at once: only JSON-looking answers are held back


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
