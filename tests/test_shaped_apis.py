"""The Anthropic Messages and OpenAI Responses APIs (`/v1/messages`, `/v1/responses`) through their
real SDKs, the `anthropic` package's client and the `openai` package's `responses.create`, streamed
and not: speculated by `cli.py serve` (the `served` fixture) and by `cli.py proxy` in front of the
embedded server, each answer equal to the same request answered standard (`X-Speculation: off`, or
upstream itself), and `/metrics` showing that drafts were verified on these endpoints. (The
translations, event for event: tests/unit/test_shaped_apis.py; against the recorded real Ollama:
tests/test_recorded_conformance.py.)"""

from __future__ import annotations

import re
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.models import DRAFT
from tests.support.proxy import running_proxy

OFF = {"X-Speculation": "off"}
TOKENS = 40
# A chat whose answer repeats an earlier one: the prompt's end (the assistant's turn) occurred before,
# so prompt lookup drafts from the first token on.
CODE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
ASK = [{"role": "user", "content": f"Repeat this code exactly:\n{CODE}"}, {"role": "assistant", "content": CODE},
       {"role": "user", "content": "Once more, exactly."}]
SYSTEM = "You are a careful coding assistant."
WEATHER = {"name": "get_weather", "description": "Current weather for a city.",
           "schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def drafted(url: str, endpoint: str) -> tuple[int, int]:
    """(draft tokens verified in all, answers speculated on `endpoint`) from /metrics."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    tokens = sum(int(n) for n in re.findall(r"^spec_decode_num_draft_tokens_total\{[^}]*\} (\d+)", text, re.M))
    answers = re.search(rf'^spec_proxy_requests_total\{{endpoint="{endpoint}",mode="speculative"}} (\d+)', text, re.M)
    return tokens, int(answers.group(1)) if answers else 0


def messages_answers(url: str, headers: dict[str, str], tools: bool = False) -> list[Any]:
    """A Messages answer's text, blocks and stop reason, whole and streamed, through the Anthropic SDK."""
    client = anthropic.Anthropic(base_url=url, api_key="any", default_headers=headers, max_retries=0, timeout=600)
    # This SDK has no `temperature` parameter any more; Ollama's layer still reads it (greedy here).
    ask: dict[str, Any] = {"model": DRAFT, "max_tokens": TOKENS, "extra_body": {"temperature": 0}, "system": SYSTEM,
                           "messages": [*ASK[:2], {"role": "user", "content": [{"type": "text", "text": "Once more, "},
                                                                               {"type": "text", "text": "exactly."}]}]}
    if tools:
        ask["tools"] = [{"name": WEATHER["name"], "description": WEATHER["description"],
                         "input_schema": WEATHER["schema"]}]
        ask["messages"] = [{"role": "user", "content": "What is the weather in Paris?"},
                           {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                                              "name": "get_weather", "input": {"city": "Paris"}}]},
                           {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                         "content": "14 degrees, light rain"}]}]
    whole = client.messages.create(**ask)
    with client.messages.stream(**ask) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    return [[block.model_dump() for block in whole.content], whole.stop_reason, whole.usage.output_tokens,
            streamed, [block.model_dump() for block in final.content], final.stop_reason]


def responses_answers(url: str, headers: dict[str, str], tools: bool = False) -> list[Any]:
    """A Responses answer's text and items, whole and streamed, through the OpenAI SDK."""
    sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="any", default_headers=headers, max_retries=0, timeout=600)
    ask: dict[str, Any] = {"model": DRAFT, "max_output_tokens": TOKENS, "temperature": 0, "instructions": SYSTEM,
                           "input": ASK}
    if tools:
        ask["tools"] = [{"type": "function", "name": WEATHER["name"], "description": WEATHER["description"],
                         "parameters": WEATHER["schema"], "strict": False}]
        ask["input"] = [{"role": "user", "content": "What is the weather in Paris?"},
                        {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                         "arguments": '{"city": "Paris"}'},
                        {"type": "function_call_output", "call_id": "call_1", "output": "14 degrees, light rain"}]
    whole = sdk.responses.create(**ask)
    events = list(sdk.responses.create(**ask, stream=True))
    completed = events[-1].response
    return [whole.output_text, [item.type for item in whole.output], whole.status, whole.usage.output_tokens,
            "".join(e.delta for e in events if e.type == "response.output_text.delta"), completed.output_text,
            [e.type for e in events if not e.type.endswith(".delta")]]


@pytest.mark.parametrize("tools", [False, True], ids=["plain", "tools"])
def test_serve_speculates_messages_and_responses_and_answers_as_without(served, tools):
    for answers, endpoint in ((messages_answers, "/v1/messages"), (responses_answers, "/v1/responses")):
        before = drafted(served, endpoint)
        standard = answers(served, OFF, tools)
        assert answers(served, {}, tools) == standard, endpoint
        after = drafted(served, endpoint)
        assert after[0] > before[0] and after[1] == before[1] + 2, (endpoint, before, after)  # whole and streamed
    if tools:
        text = httpx.get(f"{served}/metrics", timeout=30).text
        assert re.search(r'spec_proxy_tool_requests_total\{endpoint="/v1/messages",mode="speculative"\} [1-9]', text)


def test_the_proxy_speculates_them_and_answers_as_upstream(server_url):
    with running_proxy(server_url, "--pair", f"{DRAFT}=lookup", "--k", "3") as url:
        assert messages_answers(url, {}) == messages_answers(server_url, {})
        assert responses_answers(url, {}, tools=True) == responses_answers(server_url, {}, tools=True)
        assert drafted(url, "/v1/messages")[1] == 2 and drafted(url, "/v1/responses")[1] == 2
        recent = httpx.get(f"{url}/api/proxy/recent", timeout=30).json()["requests"]
        assert {(r["endpoint"], r["mode"]) for r in recent} == {("/v1/messages", "speculative"),
                                                                ("/v1/responses", "speculative")}
        # A model with no drafter goes upstream as it came, and upstream's own layer answers it.
        sdk = anthropic.Anthropic(base_url=url, api_key="any", max_retries=0, timeout=600)
        reply = sdk.messages.create(model="smollm2:135m", max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
        assert reply.type == "message" and reply.usage.output_tokens <= 4
        assert 'spec_proxy_forwarded_total{endpoint="/v1/messages",reason="no_pair"} 1' in \
            httpx.get(f"{url}/metrics", timeout=30).text


def test_thinking_asked_of_a_model_without_it(served):
    """Messages: relaxed, as Ollama relaxes it for Claude Code (answered without thinking); Responses:
    refused, as Ollama refuses it (400, in OpenAI's error shape)."""
    client = anthropic.Anthropic(base_url=served, api_key="any", max_retries=0, timeout=600)
    for headers in (OFF, {}):
        reply = client.messages.create(model=DRAFT, max_tokens=4, messages=[{"role": "user", "content": "Hi"}],
                                       thinking={"type": "enabled", "budget_tokens": 1024}, extra_headers=headers)
        assert [block.type for block in reply.content] == ["text"]
        with pytest.raises(openai.BadRequestError, match="does not support thinking"):
            openai.OpenAI(base_url=f"{served}/v1", api_key="any", max_retries=0).responses.create(
                model=DRAFT, input="Hi", max_output_tokens=4, reasoning={"effort": "high"}, extra_headers=headers)


def test_refusals_are_in_each_apis_error_shape(served):
    client = anthropic.Anthropic(base_url=served, api_key="any", max_retries=0, timeout=600)
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model=DRAFT, max_tokens=0, messages=[{"role": "user", "content": "Hi"}])
    assert refused.value.body["error"] == {"type": "invalid_request_error",
                                           "message": "max_tokens is required and must be positive"}
    with pytest.raises(anthropic.NotFoundError, match="not found"):
        client.messages.create(model="no-such-model", max_tokens=4, messages=[{"role": "user", "content": "Hi"}],
                               extra_headers=OFF)
    reply = httpx.post(f"{served}/v1/responses", json={"model": DRAFT, "input": [{"type": "nope"}]}, timeout=60)
    assert reply.status_code == 400 and reply.json()["error"]["message"] == 'input[0]: unknown input item type: "nope"'


def test_claude_codes_effort_is_relaxed_and_speculated(served):
    """Claude Code sends `output_config.effort: "high"` and `thinking: {"type": "adaptive"}` on every
    request. Ollama turns the effort into `think` and relaxes it for a model that cannot think
    (anthropic.go, routes.go `relax_thinking`): the answer is the one without them, and so it is
    speculated, as the same request without them is."""
    body = {"model": DRAFT, "max_tokens": TOKENS, "temperature": 0, "system": SYSTEM, "messages": ASK}
    claude = {**body, "output_config": {"effort": "high"}, "thinking": {"type": "adaptive"}}
    standard = httpx.post(f"{served}/v1/messages", json=body, headers=OFF, timeout=600).json()
    before = drafted(served, "/v1/messages")
    answer = httpx.post(f"{served}/v1/messages", json=claude, timeout=600).json()
    assert (answer["content"], answer["stop_reason"]) == (standard["content"], standard["stop_reason"])
    assert drafted(served, "/v1/messages")[1] == before[1] + 1
    forwarded = 'spec_proxy_forwarded_total{endpoint="/v1/messages",reason="thinking"}'
    assert forwarded not in httpx.get(f"{served}/metrics", timeout=30).text
