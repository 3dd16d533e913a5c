"""Agents get speculation: chats with tools and a history of calls and results, speculated by
`cli.py serve` and by `cli.py proxy`, answer exactly as the same server with speculation off (content
and tool calls, their random ids aside), streamed and not, through ollama-python, the OpenAI SDK and
LangChain's bind_tools. (How the engine splits an answer's text: tests/unit/test_tool_routing.py.)"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import ollama
import openai
import pytest

from tests.support.models import DRAFT, TARGET
from tests.support.proxy import running_proxy

OFF = {"X-Speculation": "off"}
OPTIONS = {"temperature": 0, "num_predict": 200}
SOURCE = '''def add(a, b):
    return a + b


def sub(a, b):
    return a - b


def mul(a, b):
    return a * b
'''
TOOLS = [{"type": "function", "function": {"name": name, "description": what, "parameters": {
    "type": "object", "properties": {field: {"type": "string"} for field in fields}, "required": list(fields)}}}
    for name, what, fields in (("read_file", "Read a file", ("path",)),
                               ("write_file", "Write a whole file", ("path", "content")))]
# An agent's second step: it read the file; now it writes it back with a change (the copy drafts find).
HISTORY = [
    {"role": "system", "content": "You are a coding agent. Use the tools to read and write files."},
    {"role": "user", "content": "Add a one-line docstring to every function in calc.py."},
    {"role": "assistant", "content": '{"name": "read_file", "arguments": {"path": "calc.py"}}'},
    {"role": "tool", "tool_name": "read_file", "content": SOURCE},
]

# The same step as LangChain sends it (its tool messages need the call's id): the file in the question.
ASK = [("system", HISTORY[0]["content"]),
       ("user", f"{HISTORY[1]['content']} This is calc.py:\n{SOURCE}\nWrite it back with write_file.")]


def drafted(url: str) -> int:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(int(n) for n in re.findall(r"^spec_decode_num_draft_tokens_total\{[^}]*\} (\d+)", text, re.M))


def calls(message) -> list[tuple[str, dict]]:
    """A message's tool calls without their ids (random, as Ollama's)."""
    return [(call.function.name, dict(call.function.arguments)) for call in message.tool_calls or []]


def ollama_answers(url: str, model: str, headers: dict[str, str]) -> Iterator[tuple]:
    client = ollama.Client(host=url, headers=headers, timeout=600)
    whole = client.chat(model=model, messages=HISTORY, tools=TOOLS, options=OPTIONS)
    yield whole.message.content, calls(whole.message), whole.done_reason
    parts = list(client.chat(model=model, messages=HISTORY, tools=TOOLS, options=OPTIONS, stream=True))
    yield ("".join(part.message.content for part in parts), [c for part in parts for c in calls(part.message)],
           parts[-1].done_reason)


@pytest.mark.parametrize("model", [DRAFT, TARGET], ids=["prompt-lookup", "qwen-pair"])
def test_a_tool_chat_is_speculated_by_serve_and_answers_as_without(served, model):
    before = drafted(served)
    standard, speculated = list(ollama_answers(served, model, OFF)), list(ollama_answers(served, model, {}))
    assert speculated == standard
    assert drafted(served) > before  # drafts were verified
    text = httpx.get(f"{served}/metrics", timeout=30).text
    assert re.search(r'spec_proxy_tool_requests_total\{endpoint="/api/chat",mode="speculative"\} [1-9]', text)


def test_the_openai_sdk_and_langchain_with_tools_get_the_same_answers_speculated(served):
    from langchain_ollama import ChatOllama

    def sdk_answers(headers: dict[str, str]) -> list:
        sdk = openai.OpenAI(base_url=f"{served}/v1", api_key="unused", default_headers=headers, max_retries=0)
        ask = {"model": DRAFT, "messages": HISTORY, "tools": TOOLS, "temperature": 0, "max_tokens": 200}
        whole = sdk.chat.completions.create(**ask).choices[0]
        chunks = [c for c in sdk.chat.completions.create(**ask, stream=True) if c.choices]
        return [whole.message.content, whole.finish_reason,
                "".join(c.choices[0].delta.content or "" for c in chunks), chunks[-1].choices[0].finish_reason]

    assert sdk_answers({}) == sdk_answers(OFF)
    replies = [ChatOllama(model=DRAFT, base_url=served, temperature=0, num_predict=200, client_kwargs={"headers": h})
               .bind_tools(TOOLS).invoke(ASK) for h in ({}, OFF)]
    assert (replies[0].content, replies[0].tool_calls) == (replies[1].content, replies[1].tool_calls)


def test_a_tool_chat_is_speculated_through_the_proxy_and_answers_as_upstream(server_url):
    with running_proxy(server_url, "--pair", f"{DRAFT}=lookup", "--k", "3") as url:
        assert list(ollama_answers(url, DRAFT, {})) == list(ollama_answers(server_url, DRAFT, {}))
        text = httpx.get(f"{url}/metrics", timeout=30).text
        assert 'spec_proxy_tool_requests_total{endpoint="/api/chat",mode="speculative"} 2' in text
        assert drafted(url) > 0
