"""Tools on the embedded server: rendered by the model's template (for qwen2.5-coder, Ollama's library
TEMPLATE and SYSTEM, as Ollama renders them), tool results rendered, and the answer parsed as Ollama
0.32.15 parses it (utils/tool_calls.py): a call written with the template's tag (<tool_call>) is
`message.tool_calls`, and qwen2.5-coder:1.5b's bare-JSON call is content, as Ollama returns it
(recordings 22-28); through ollama-python, the OpenAI SDK and LangChain."""

from __future__ import annotations

import json

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
    # Ollama's library template prints the tool as Ollama's Go struct, the call's arguments as Go's JSON.
    assert rendered.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")
    assert ('<tools>\n{"type": "function", "function": {get_weather Get the current weather for a city '
            '{object <nil> <nil> [city] {"city":{"type":"string","description":"The city"}}}}}\n</tools>') in rendered
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call>' in rendered
    assert "<tool_response>\nSunny, 21 degrees\n</tool_response>" in rendered
    assert rendered.endswith("<|im_start|>assistant\n")


def bare_call(content: str) -> dict:
    """The call qwen2.5-coder:1.5b writes as text: bare JSON, as it answers Ollama (recordings 22-28; the
    GGUF's own template drew a ```json fence from it, which this refuses)."""
    return json.loads(content)


def test_ollama_python_gets_a_bare_json_call_as_content_as_from_ollama(server_url):
    """The model answers the call without the <tool_call> tags its template asks for; Ollama 0.32.15
    returns that as content, with no tool_calls (recordings 22-25), and so does the embedded server."""
    client = ollama.Client(host=server_url)
    answer = client.chat(model=TOOLS_MODEL, messages=QUESTION, tools=[get_weather], options=OPTIONS)
    assert not answer.message.tool_calls and answer.done_reason == "stop"
    assert bare_call(answer.message.content) == {"name": "get_weather", "arguments": {"city": "Paris"}}
    parts = list(client.chat(model=TOOLS_MODEL, messages=QUESTION, tools=[get_weather], options=OPTIONS,
                             stream=True))
    assert not any(part.message.tool_calls for part in parts)
    assert "".join(part.message.content for part in parts) == answer.message.content
    assert all(part.message.content for part in parts[:-1]) and parts[-1].done and parts[-1].message.content == ""

    # A call the client makes of it goes back as a `tool` message after the assistant's tool_calls.
    followup = QUESTION + [{"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": get_weather("Paris"), "tool_name": "get_weather"}]
    final = client.chat(model=TOOLS_MODEL, messages=followup, tools=[get_weather], options=OPTIONS)
    assert final.done and (final.message.content or final.message.tool_calls)


def test_a_question_that_needs_no_tool_is_answered_in_words(server_url):
    answer = ollama.Client(host=server_url).chat(
        model=TOOLS_MODEL, messages=[{"role": "user", "content": "Say hello in French, in one word."}],
        tools=[get_weather], options=OPTIONS)
    assert not answer.message.tool_calls and answer.message.content.strip()


def test_openai_sdk_gets_the_bare_call_as_content_as_from_ollama(server_url):
    from openai import OpenAI

    sdk = OpenAI(base_url=f"{server_url}/v1", api_key="unused", max_retries=0)
    whole = sdk.chat.completions.create(model=TOOLS_MODEL, messages=QUESTION, tools=[WEATHER_TOOL], temperature=0,
                                        max_tokens=60)
    choice = whole.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls  # recording 27
    assert bare_call(choice.message.content)["name"] == "get_weather"
    chunks = list(sdk.chat.completions.create(model=TOOLS_MODEL, messages=QUESTION, tools=[WEATHER_TOOL],
                                              temperature=0, max_tokens=60, stream=True))
    assert not any(chunk.choices[0].delta.tool_calls for chunk in chunks)  # recording 28
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == choice.message.content
    assert chunks[-1].choices[0].finish_reason == "stop"

    # The OpenAI way back: the assistant's call (arguments as a JSON string), then the tool's result.
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    followup = QUESTION + [{"role": "assistant", "content": None, "tool_calls": [call]},
                           {"role": "tool", "tool_call_id": "call_1", "content": get_weather("Paris")}]
    final = sdk.chat.completions.create(model=TOOLS_MODEL, messages=followup, tools=[WEATHER_TOOL], temperature=0,
                                        max_tokens=60)
    assert final.choices[0].message.content or final.choices[0].message.tool_calls


def test_langchain_bind_tools_gets_the_answer_as_ollama_gives_it(server_url):
    from langchain_ollama import ChatOllama

    model = ChatOllama(model=TOOLS_MODEL, base_url=server_url, temperature=0, num_predict=60)
    reply = model.bind_tools([get_weather]).invoke("What is the weather in Paris right now?")
    assert reply.tool_calls == [] and bare_call(reply.content)["name"] == "get_weather"


def test_a_tagged_call_is_a_tool_call_streamed_and_whole():
    """What the server makes of an answer written with the model's tag (the 1.5B model writes none,
    so its pieces stand in for it, through the server's own Shape): the call as message.tool_calls,
    nothing of it in the content, the text before it streamed, as Ollama's chat handler does."""
    from tests.support.recorded import load
    from utils.embedded.http.answer import Shape
    from utils.tool_calls import tool_tag

    tag = tool_tag(load("03-show-qwen2_5-coder_1_5b").json()["template"])  # the GGUF's own Jinja template
    assert tag == "<tool_call>"
    pieces = ["Let me check.", "\n", "<tool", "_call>", "\n", '{"name": "get_weather", ', '"arguments": ',
              '{"city": "Paris"}}', "\n", "</tool_call>"]
    shape = Shape([WEATHER_TOOL], 0, tag=tag)
    streamed = [shape.fields(piece, True)["message"] for piece in pieces]
    streamed.append(shape.fields("", True, final=True)["message"])
    sent = [m for m in streamed if m["content"] or m.get("tool_calls")]
    assert [m["content"] for m in sent] == ["Let me check.", "\n", ""]
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in sent[2]["tool_calls"]] == [
        ("get_weather", {"city": "Paris"})]
    whole = Shape([WEATHER_TOOL], 0, tag=tag).whole(pieces)["message"]
    assert whole["content"] == "Let me check.\n" and whole["tool_calls"][0]["function"]["index"] == 0


def test_a_model_whose_template_has_no_tools_refuses_them(server_url):
    client = ollama.Client(host=server_url)
    assert "tools" in client.show(TOOLS_MODEL).capabilities and "tools" not in client.show(SMALL).capabilities
    with pytest.raises(ollama.ResponseError) as refused:
        ollama.Client(host=server_url).chat(model=SMALL, messages=QUESTION, tools=[get_weather])
    assert refused.value.status_code == 400
    assert refused.value.error == f"registry.ollama.ai/library/{SMALL} does not support tools"
