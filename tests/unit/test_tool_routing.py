"""Agents' requests reach the engine: the proxy's decision (routing.plan) on the tool-carrying bodies a
real Ollama 0.32.15 answered (tests/data/ollama-recorded/ 22-28), the metrics that count them, and the
engine's answer split into content and calls as Ollama streams them (tool_answer.py)."""

from __future__ import annotations

import re

import pytest

from tests.support.recorded import load
from utils.api import openai
from utils.engine.events import DoneEvent, TextEvent, ToolCallEvent
from utils.engine.stats import AnswerStats
from utils.engine.tool_answer import ToolAnswer
from utils.proxy.metrics import ProxyMetrics
from utils.proxy.routing import Forward, Speculation, carries_tools, plan

PAIRS = {"qwen2.5-coder:1.5b": "suffix"}
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]


@pytest.mark.parametrize("name", ["22-chat-tools", "23-chat-tools-stream", "24-chat-tools-result",
                                  "25-chat-tools-write"])
def test_a_chat_with_tools_or_a_tool_history_is_speculated_with_both(name: str) -> None:
    body = load(name).request
    assert body is not None and carries_tools(body)
    job = plan(body, True, PAIRS)
    assert isinstance(job, Speculation) and job.tools, job
    assert job.request.tools == body["tools"]
    # What the template renders of the history goes with it as sent: the calls, the tool's name.
    for sent, kept in zip(body["messages"], job.request.messages or []):
        assert {field: sent[field] for field in ("role", "tool_calls", "tool_name") if field in sent} == {
            field: kept[field] for field in ("role", "tool_calls", "tool_name") if field in kept}


@pytest.mark.parametrize("name", ["27-v1-chat-tools", "28-v1-chat-tools-stream"])
def test_an_openai_chat_with_tools_is_speculated(name: str) -> None:
    body = load(name).request
    assert body is not None
    job = plan(openai.chat_body(body), True, PAIRS)
    assert isinstance(job, Speculation) and job.request.tools and job.tools


def test_what_the_engine_cannot_honour_in_a_tool_chat_still_goes_upstream_with_its_reason() -> None:
    body = load("24-chat-tools-result").request
    assert body is not None
    images = {**body, "messages": [*body["messages"], {"role": "user", "content": "and this?", "images": ["AA=="]}]}
    assert plan(images, True, PAIRS) == Forward("images", "messages with `images` are served by upstream")
    bad = plan({**body, "tools": "get_weather"}, True, PAIRS)
    assert isinstance(bad, Forward) and bad.code == "invalid"
    assert not carries_tools({"model": "m", "messages": [{"role": "user", "content": "hi"}]})


def test_the_metrics_count_tool_carrying_requests_by_how_they_were_served() -> None:
    metrics = ProxyMetrics()
    metrics.observe_forward("c", "/api/chat", "m", "images", "why", tools=True)
    metrics.observe_forward("c", "/api/chat", "m", "images", "why")
    text = metrics.prometheus()
    assert 'spec_proxy_tool_requests_total{endpoint="/api/chat",mode="forwarded"} 1' in text
    assert 'spec_proxy_requests_total{endpoint="/api/chat",mode="forwarded"} 2' in text


def test_the_engines_text_is_split_into_content_and_calls_as_ollama_streams_it():
    """The pieces of an answer written with the template's tag, through the engine's splitter: the
    text before the tag streams, the call comes whole when it completes, nothing of it is content,
    and what the parser held to the end rides on the closing event (as on Ollama's last message)."""
    split = ToolAnswer("<tool_call>", TOOLS).split
    pieces = ["Reading.", "\n", "<tool", "_call>", '\n{"name": "read_file", ', '"arguments": {"path": "calc.py"}}',
              "\n</tool_call>"]
    events = [event for piece in pieces for event in split(TextEvent(piece, "draft"))]
    assert [e.text for e in events if isinstance(e, TextEvent)] == ["Reading.", "\n"]
    (call,) = [e for e in events if isinstance(e, ToolCallEvent)]
    assert call.calls[0]["function"] == {"index": 0, "name": "read_file", "arguments": {"path": "calc.py"}}
    assert re.fullmatch(r"call_[a-z0-9]{8}", call.calls[0]["id"])
    done = split(DoneEvent("raw text", AnswerStats(mode="speculative", target="t")))
    assert isinstance(done[-1], DoneEvent) and done[-1].text == "Reading.\n" and done[-1].tail == ""
    # A model whose template has no tag: JSON is held until it closes (and is no call, so content) ...
    split = ToolAnswer("{", TOOLS).split
    assert split(TextEvent('{"answer": ', "standard")) == []
    assert split(TextEvent("42}", "standard")) == [TextEvent('{"answer": 42}', "standard")]
    # ... and JSON the answer left open comes on the closing event.
    split = ToolAnswer("{", TOOLS).split
    assert split(TextEvent('{"answer": ', "standard")) == []
    done = split(DoneEvent("", AnswerStats(mode="speculative", target="t")))
    assert done[-1].tail == done[-1].text == '{"answer": '
