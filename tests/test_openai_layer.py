"""The embedded server's OpenAI-compatible layer, through the official OpenAI Python SDK, on smollm2:135m.

Each OpenAI answer is checked against the same request made through Ollama's own API (greedy, so the
two must be the same text): the layer is a translation, never another way of generating.
"""

from __future__ import annotations

import httpx
import openai
import pytest
from openai import OpenAI

from utils.embedded.store.models import ModelStore

SMALL = "smollm2:135m"
QUESTION = [{"role": "user", "content": "Name three colours."}]
# OpenAI's defaults that Ollama's layer applies (temperature 1 and top_p 1 unless given).
AS_OPENAI = {"temperature": 0, "top_p": 1.0}


@pytest.fixture
def sdk(server_url: str) -> OpenAI:
    return OpenAI(base_url=f"{server_url}/v1", api_key="unused", max_retries=0)


def ollama_chat(server_url: str, num_predict: int, **body) -> dict:
    request = {"model": SMALL, "messages": QUESTION, "stream": False,
               "options": {**AS_OPENAI, "num_predict": num_predict}, **body}
    return httpx.post(f"{server_url}/api/chat", json=request, timeout=120).json()


def test_models_are_listed_and_retrieved_as_openai_objects(sdk):
    installed = {spec.name for spec in ModelStore(__import__("config").get_settings().models_dir).installed()}
    listed = sdk.models.list().data
    assert {m.id for m in listed} == installed and SMALL in installed
    assert all(m.object == "model" and m.owned_by == "library" and m.created > 0 for m in listed)
    one = sdk.models.retrieve(SMALL)
    assert (one.id, one.object, one.owned_by) == (SMALL, "model", "library")


def test_chat_whole_and_streamed_is_ollamas_answer_in_openais_shape(sdk, server_url):
    expected = ollama_chat(server_url, 30)
    whole = sdk.chat.completions.create(model=SMALL, messages=QUESTION, temperature=0, max_tokens=30)
    choice = whole.choices[0]
    assert choice.message.content == expected["message"]["content"] and choice.message.role == "assistant"
    assert choice.finish_reason == ("length" if expected["done_reason"] == "length" else "stop")
    assert whole.object == "chat.completion" and whole.id.startswith("chatcmpl-") and whole.model == SMALL
    assert whole.system_fingerprint == "fp_ollama"
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (expected["prompt_eval_count"],
                                                                           expected["eval_count"])
    chunks = list(sdk.chat.completions.create(model=SMALL, messages=QUESTION, temperature=0, max_tokens=30,
                                              stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected["message"]["content"]
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == choice.finish_reason
    assert not chunks[-1].choices and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_completions_whole_and_streamed(sdk, server_url):
    prompt = "Write one sentence about the sea."
    expected = httpx.post(f"{server_url}/api/generate", timeout=120, json={
        "model": SMALL, "prompt": prompt, "stream": False, "options": {**AS_OPENAI, "num_predict": 20}}).json()
    whole = sdk.completions.create(model=SMALL, prompt=prompt, temperature=0, max_tokens=20)
    assert whole.choices[0].text == expected["response"] and whole.object == "text_completion"
    assert whole.usage.completion_tokens == expected["eval_count"]
    streamed = list(sdk.completions.create(model=SMALL, prompt=prompt, temperature=0, max_tokens=20, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == expected["response"]
    assert streamed[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_failures_are_openai_error_objects_with_ollamas_status(sdk, server_url):
    with pytest.raises(openai.NotFoundError) as missing:
        sdk.chat.completions.create(model="no-such-model:1b", messages=QUESTION)
    assert missing.value.body == {"message": "model 'no-such-model:1b' not found", "type": "not_found_error",
                                  "param": None, "code": None}
    with pytest.raises(openai.NotFoundError):
        sdk.models.retrieve("no-such-model:1b")
    with pytest.raises(openai.BadRequestError) as empty:
        sdk.chat.completions.create(model=SMALL, messages=[])
    assert empty.value.body["type"] == "invalid_request_error" and "messages" in empty.value.body["message"]
    with pytest.raises(openai.BadRequestError) as format_error:
        sdk.chat.completions.create(model=SMALL, messages=QUESTION,
                                    response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": 5}})
    assert "format" in format_error.value.body["message"]
    not_json = httpx.post(f"{server_url}/v1/chat/completions", content=b"{not json", timeout=30)
    assert not_json.status_code == 400 and not_json.json()["error"]["type"] == "invalid_request_error"
    assert httpx.get(f"{server_url}/api/version").status_code == 200  # and the server goes on
