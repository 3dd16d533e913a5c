"""Tools on the embedded server: rendered by the model's own chat template, tool calls in its output
returned as `message.tool_calls` (streamed too, without leaking into the content), tool results
rendered; through ollama-python, the OpenAI SDK and LangChain, on qwen2.5-coder:1.5b."""

from __future__ import annotations

import httpx
import ollama
import pytest

SMALL = "smollm2:135m"
TOOLS_MODEL = "qwen2.5-coder:1.5b"
OPTIONS = {"temperature": 0, "num_predict": 60}
QUESTION = [{"role": "user", "content": "What is the weather in Paris right now?"}]


def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The name of the city
    """
    return f"Sunny, 21 degrees in {city}"


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"}},
                   "required": ["city"]}}}


def test_the_template_renders_tools_and_tool_results(server_url):
    messages = QUESTION + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "Sunny, 21 degrees", "tool_name": "get_weather"}]
    rendered = httpx.post(f"{server_url}/api/chat", timeout=120, json={
        "model": TOOLS_MODEL, "messages": messages, "tools": [WEATHER_TOOL], "_debug_render_only": True,
    }).json()["_debug_info"]["rendered_template"]
    assert '<tools>\n{"type": "function", "function": {"name": "get_weather"' in rendered
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in rendered
    assert "<tool_response>\nSunny, 21 degrees\n</tool_response>" in rendered
    assert rendered.endswith("<|im_start|>assistant\n")


def test_ollama_python_gets_a_tool_call_whole_and_streamed(server_url):
    client = ollama.Client(host=server_url)
    answer = client.chat(model=TOOLS_MODEL, messages=QUESTION, tools=[get_weather], options=OPTIONS)
    calls = answer.message.tool_calls
    assert calls and calls[0].function.name == "get_weather"
    assert calls[0].function.arguments == {"city": "Paris"}
    assert "get_weather" not in answer.message.content and "tool_call" not in answer.message.content
    parts = list(client.chat(model=TOOLS_MODEL, messages=QUESTION, tools=[get_weather], options=OPTIONS,
                             stream=True))
    streamed_calls = [call for part in parts for call in part.message.tool_calls or []]
    assert [(c.function.name, c.function.arguments) for c in streamed_calls] == [("get_weather", {"city": "Paris"})]
    content = "".join(part.message.content for part in parts)
    assert "get_weather" not in content and "{" not in content  # nothing of the call leaked into the text

    # The tool's result goes back as a `tool` message (the client's own Message with its tool_calls).
    # What the 1.5B model does with it varies (it often calls the tool again); the rendering of such
    # a conversation is checked exactly above.
    followup = QUESTION + [answer.message, {"role": "tool", "content": get_weather("Paris"),
                                            "tool_name": "get_weather"}]
    final = client.chat(model=TOOLS_MODEL, messages=followup, tools=[get_weather], options=OPTIONS)
    assert final.done and (final.message.content or final.message.tool_calls)


def test_a_question_that_needs_no_tool_is_answered_in_words(server_url):
    answer = ollama.Client(host=server_url).chat(
        model=TOOLS_MODEL, messages=[{"role": "user", "content": "Say hello in French, in one word."}],
        tools=[get_weather], options=OPTIONS)
    assert not answer.message.tool_calls and answer.message.content.strip()


def test_openai_sdk_gets_openai_tool_calls(server_url):
    import json

    from openai import OpenAI

    sdk = OpenAI(base_url=f"{server_url}/v1", api_key="unused", max_retries=0)
    whole = sdk.chat.completions.create(model=TOOLS_MODEL, messages=QUESTION, tools=[WEATHER_TOOL], temperature=0,
                                        max_tokens=60)
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    chunks = list(sdk.chat.completions.create(model=TOOLS_MODEL, messages=QUESTION, tools=[WEATHER_TOOL],
                                              temperature=0, max_tokens=60, stream=True))
    streamed = [c for chunk in chunks for c in chunk.choices[0].delta.tool_calls or []]
    assert [(c.function.name, json.loads(c.function.arguments)) for c in streamed] == [
        ("get_weather", {"city": "Paris"})]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    # The OpenAI way back: the assistant's call (arguments as a JSON string), then the tool's result.
    followup = QUESTION + [choice.message.model_dump(exclude_none=True),
                           {"role": "tool", "tool_call_id": call.id, "content": get_weather("Paris")}]
    final = sdk.chat.completions.create(model=TOOLS_MODEL, messages=followup, tools=[WEATHER_TOOL], temperature=0,
                                        max_tokens=60)
    assert final.choices[0].message.content or final.choices[0].message.tool_calls


def test_langchain_bind_tools_gets_a_tool_call(server_url):
    from langchain_ollama import ChatOllama

    model = ChatOllama(model=TOOLS_MODEL, base_url=server_url, temperature=0, num_predict=60)
    reply = model.bind_tools([get_weather]).invoke("What is the weather in Paris right now?")
    assert [(c["name"], c["args"]) for c in reply.tool_calls] == [("get_weather", {"city": "Paris"})]


def test_a_model_whose_template_has_no_tools_refuses_them(server_url):
    client = ollama.Client(host=server_url)
    assert "tools" in client.show(TOOLS_MODEL).capabilities and "tools" not in client.show(SMALL).capabilities
    with pytest.raises(ollama.ResponseError) as refused:
        ollama.Client(host=server_url).chat(model=SMALL, messages=QUESTION, tools=[get_weather])
    assert refused.value.status_code == 400
    assert refused.value.error == f"registry.ollama.ai/library/{SMALL} does not support tools"
