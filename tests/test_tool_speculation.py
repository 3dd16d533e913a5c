"""Agents get speculation: chats with tools and a history of calls and results, speculated by
`cli.py serve` and by `cli.py proxy`, answer exactly as the same server with speculation off (content
and tool calls, their random ids aside), streamed and not, through ollama-python, the OpenAI SDK and
LangChain's bind_tools; a call the model writes in its template's tag comes back as the call upstream
parses (a stand-in model whose tag the model writes: tests/support/fenced_model.py); sampled tool
chats keep the target's distribution; steps of the agent workload (prompts/agents.jsonl) through the
proxy are all speculated. (How the engine splits an answer's text: tests/unit/test_tool_routing.py.)"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import openai
import pytest

from tests.support.distribution import assert_fits, sampled_first_tokens
from tests.support.fenced_model import FENCED, fenced_server
from tests.support.models import DRAFT, TARGET
from tests.support.proxy import running_proxy
from utils.bench.agents import session_steps
from utils.sampling import SamplingOptions, text_distribution

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


# -- a call in the template's tag, through every client, by serve and through the proxy ---------------

# The system message shows a call as the model writes it, so that prompt lookup has something to draft.
EXAMPLE = '```json\n{\n  "name": "read_file",\n  "arguments": {\n    "path": "notes.txt"\n  }\n}\n```'
READ = [{"role": "system", "content": f"{HISTORY[0]['content']} A call looks like this:\n{EXAMPLE}"},
        {"role": "user", "content": "Read the file calc.py."}]


@pytest.fixture(scope="module")
def fenced(tmp_path_factory) -> Iterator[str]:
    """A speculating server (prompt lookup, K = 4) with the stand-in whose tool-call tag is a fence."""
    with fenced_server(tmp_path_factory.mktemp("fenced"), speculation=True,
                       args=("--pair", f"{FENCED}=lookup", "--k", "4")) as url:
        yield url


def sdk_calls(calls) -> list[tuple[str, dict]]:
    return [(call.function.name, json.loads(call.function.arguments)) for call in calls or []]


def client_answers(url: str, headers: dict[str, str]) -> dict[str, tuple]:
    """READ asked of FENCED six ways: ollama-python `tools=`, the OpenAI SDK with `tools` and
    `tool_choice: "auto"`, LangChain's bind_tools, each whole and streamed; each as (content, calls
    without ids, how it ended)."""
    client = ollama.Client(host=url, headers=headers, timeout=600)
    whole = client.chat(model=FENCED, messages=READ, tools=TOOLS, options=OPTIONS)
    parts = list(client.chat(model=FENCED, messages=READ, tools=TOOLS, options=OPTIONS, stream=True))
    sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", default_headers=headers, max_retries=0, timeout=600)
    ask = {"model": FENCED, "messages": READ, "tools": TOOLS, "tool_choice": "auto", "temperature": 0,
           "max_tokens": 200}
    choice = sdk.chat.completions.create(**ask).choices[0]
    chunks = [chunk.choices[0] for chunk in sdk.chat.completions.create(**ask, stream=True) if chunk.choices]
    from langchain_ollama import ChatOllama

    chat = ChatOllama(model=FENCED, base_url=url, temperature=0, num_predict=200,
                      client_kwargs={"headers": headers}).bind_tools(TOOLS)
    reply = chat.invoke(READ)
    pieces = list(chat.stream(READ))
    streamed = sum(pieces[1:], pieces[0])  # LangChain's own merge of the chunks
    return {
        "ollama": (whole.message.content, calls(whole.message), whole.done_reason),
        "ollama streamed": ("".join(part.message.content for part in parts),
                            [c for part in parts for c in calls(part.message)], parts[-1].done_reason),
        "openai": (choice.message.content or "", sdk_calls(choice.message.tool_calls), choice.finish_reason),
        "openai streamed": ("".join(c.delta.content or "" for c in chunks),
                            [call for c in chunks for call in sdk_calls(c.delta.tool_calls)], chunks[-1].finish_reason),
        "langchain": (reply.content, [(c["name"], c["args"]) for c in reply.tool_calls],
                      reply.response_metadata.get("done_reason")),
        "langchain streamed": (streamed.content, [(c["name"], c["args"]) for c in streamed.tool_calls],
                               streamed.response_metadata.get("done_reason")),
    }


def tool_requests(url: str, mode: str) -> int:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(int(n) for n in re.findall(rf'^spec_proxy_tool_requests_total\{{[^}}]*mode="{mode}"[^}}]*\}} (\d+)',
                                          text, re.M))


def test_a_call_in_the_templates_tag_is_returned_as_upstream_parses_it_by_serve_and_through_the_proxy(fenced):
    """The model writes its call in the template's tag (a ```json fence); upstream's parser returns it as
    a call with no content. Speculated by serve and through the proxy, every client gets the same."""
    standard = client_answers(fenced, OFF)
    assert {name: answer[:2] for name, answer in standard.items()} == {
        name: ("", [("read_file", {"path": "calc.py"})]) for name in standard}, standard  # a call, parsed
    before, speculated_before = drafted(fenced), tool_requests(fenced, "speculative")
    assert client_answers(fenced, {}) == standard
    assert drafted(fenced) > before and tool_requests(fenced, "speculative") - speculated_before == 6
    with running_proxy(fenced, "--pair", f"{FENCED}=lookup", "--k", "3") as url:
        assert client_answers(url, {}) == standard
        assert tool_requests(url, "speculative") == 6 and tool_requests(url, "forwarded") == 0
        assert drafted(url) > 0


# -- sampled tool chats keep the target's distribution --------------------------------------------------



def test_sampled_tool_chats_keep_the_target_distribution(served):
    """HISTORY's next answer begins `{"`, a fence, `<` (the tag's first letters) or `{` and a newline:
    240 sampled answers to the chat with its tools, speculated (prompt lookup drafts from the first
    token: the prompt's end, the assistant's turn, occurs before the earlier call), must draw their
    first token as the target's top-5 distribution at temperature 1 says (chi-square, p = 0.001), as
    tests/test_serve_speculation.py checks a plain prompt."""
    options = SamplingOptions(temperature=1.0, top_k=5, top_p=1.0)
    render = {"model": DRAFT, "messages": HISTORY, "tools": TOOLS, "stream": False, "_debug_render_only": True}
    prompt = httpx.post(f"{served}/api/chat", json=render, timeout=300).json()["_debug_info"]["rendered_template"]
    probe = {"model": DRAFT, "prompt": prompt, "raw": True, "stream": False, "logprobs": True, "top_logprobs": 20,
             "options": {"temperature": 0, "num_predict": 1}}
    top = httpx.post(f"{served}/api/generate", json=probe, headers=OFF, timeout=300).json()["logprobs"][0]
    expected = text_distribution({t["token"]: t["logprob"] for t in top["top_logprobs"]}, options)
    assert sum(p > 0.03 for p in expected.values()) >= 3, expected  # a distribution worth testing
    runs = 240
    body = {"model": DRAFT, "messages": HISTORY, "tools": TOOLS, "stream": False,
            "options": {"temperature": 1.0, "top_k": 5, "top_p": 1.0, "num_predict": 3}}
    # 3 tokens are never a whole call: all of the answer is content.
    seen, methods, drafts = sampled_first_tokens(served, "/api/chat", body, runs, expected,
                                                 lambda reply: reply["message"]["content"])
    assert methods == {"sample-match"} and drafts > 0, (methods, drafts)
    assert_fits(seen, expected, runs)


# -- the agent workload through the proxy: every tool-carrying request speculated -------------------------

AGENTS = Path(__file__).parents[1] / "prompts" / "agents.jsonl"


def test_agent_workload_steps_through_the_proxy_are_all_speculated(server_url):
    """The first three steps of the workload's first session, each after the answers before it (as
    `cli.py bench` asks them), through the proxy: /metrics counts three tool-carrying requests, all
    speculated, none forwarded. K is fixed: with K chosen by the controller, the 0.5B target on a
    2-core CPU is forwarded as `no_gain` after its first answer (the 1.5B, the workload's target,
    was speculated on all three), a decision about speed that is not this test's."""
    session = json.loads(AGENTS.read_text().splitlines()[0])
    steps = session_steps(session)[:3]
    history: list[dict] = []
    with running_proxy(server_url, "--pair", f"{DRAFT}=suffix", "--k", "3") as url:
        client = ollama.Client(host=url, timeout=600)
        for step in steps:
            history += step["said"]
            reply = client.chat(model=DRAFT, messages=history, tools=step["tools"],
                                options={"temperature": 0, "num_predict": 16})
            history.append({"role": "assistant", "content": reply.message.content})
        assert (tool_requests(url, "speculative"), tool_requests(url, "forwarded")) == (3, 0)
