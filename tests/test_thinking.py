"""Thinking on the embedded server as Ollama has it: the `thinking` capability, `think` (true, a level,
absent = true, false), the template's `enable_thinking`, and the answer split into thinking and
content on /api/chat and /api/generate (raw too), streamed and not, through ollama-python.

The thinking model is a stand-in (tests/support/thinking_model.py: qwen2.5-coder:0.5b with a
Qwen3-style template), on a server with a data folder of its own.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import ollama
import openai
import pytest

from tests.support.models import DRAFT
from tests.support.own_server import own_server
from tests.support.thinking_model import register, write_gguf

QUESTION = "What is 3 + 5?"
ASK = [{"role": "user", "content": QUESTION}]
QUICK = {"temperature": 0, "num_predict": 40}


@pytest.fixture(scope="module")
def thinker(tmp_path_factory) -> Iterator[tuple[ollama.Client, str, str]]:
    """(a client, the stand-in's name, the server's URL)."""
    folder = tmp_path_factory.mktemp("thinking")
    with own_server(folder, (DRAFT,)) as url:
        client = ollama.Client(host=url)
        name = register(url, write_gguf(folder))
        yield client, name, url
        client.delete(name)


def rendered(url: str, name: str, **think) -> str:
    reply = httpx.post(f"{url}/api/chat", json={"model": name, "messages": ASK, "_debug_render_only": True, **think})
    assert reply.status_code == 200, reply.text
    return reply.json()["_debug_info"]["rendered_template"]


def test_a_thinking_template_gives_the_capability(thinker):
    client, name, url = thinker
    assert "thinking" in client.show(name).capabilities
    assert "thinking" not in client.show(DRAFT).capabilities


def test_thinking_is_split_from_the_content_streamed_or_not(thinker):
    client, name, url = thinker
    answer = client.chat(model=name, messages=ASK, options=QUICK)  # no think: true for a thinking model
    thinking, content = answer.message.thinking, answer.message.content
    assert thinking and content and "8" in content, answer.message
    assert "<think>" not in thinking + content and "</think>" not in thinking + content
    assert not content[0].isspace()  # the whitespace after </think> is dropped, as Ollama's parser does
    assert client.chat(model=name, messages=ASK, options=QUICK, think=True).message == answer.message
    assert client.chat(model=name, messages=ASK, options=QUICK, think="high").message == answer.message

    chunks = list(client.chat(model=name, messages=ASK, options=QUICK, stream=True))
    assert "".join(chunk.message.thinking or "" for chunk in chunks) == thinking
    assert "".join(chunk.message.content for chunk in chunks) == content
    assert all(chunk.message.thinking or chunk.message.content for chunk in chunks[:-1])  # none held back empty
    assert chunks[-1].done and chunks[-1].done_reason == answer.done_reason

    generated = client.generate(model=name, prompt=QUESTION, options=QUICK)
    assert (generated.thinking, generated.response) == (thinking, content)
    pieces = list(client.generate(model=name, prompt=QUESTION, options=QUICK, stream=True))
    assert "".join(piece.thinking or "" for piece in pieces) == thinking
    assert "".join(piece.response for piece in pieces) == content


def test_think_false_switches_the_template_and_the_split_off(thinker):
    client, name, url = thinker
    assert rendered(url, name).endswith("<|im_start|>assistant\n<think>\n")
    assert rendered(url, name, think=True) == rendered(url, name)
    assert rendered(url, name, think=False).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    answer = client.chat(model=name, messages=ASK, options=QUICK, think=False)
    assert answer.message.thinking is None and "8" in answer.message.content and "<think>" not in answer.message.content
    # Raw: the output is split while thinking is on (absent: on), untouched with think false.
    prompt = rendered(url, name)
    split = client.generate(model=name, prompt=prompt, raw=True, options=QUICK)
    assert split.thinking and split.response and "</think>" not in split.response
    whole = client.generate(model=name, prompt=prompt, raw=True, options=QUICK, think=False)
    assert whole.thinking is None and "</think>" in whole.response


def test_think_is_refused_where_ollama_refuses_it(thinker):
    client, name, url = thinker
    with pytest.raises(ollama.ResponseError) as refused:  # recorded 17
        client.generate(model=DRAFT, prompt="def add(a, b):\n    ", raw=True, think=True, options=QUICK)
    assert refused.value.status_code == 400 and refused.value.error == f'"{DRAFT}" does not support thinking'
    assert client.generate(model=DRAFT, prompt="def add(a, b):\n    ", raw=True, think=False,
                           options={**QUICK, "num_predict": 4}).thinking is None  # recorded 16
    reply = httpx.post(f"{url}/api/chat", json={"model": name, "messages": ASK, "think": "loud", "stream": False})
    assert reply.status_code == 400 and "invalid think value" in reply.json()["error"]
    reply = httpx.post(f"{url}/api/chat", json={"model": name, "messages": ASK, "format": "json", "stream": False})
    assert reply.status_code == 501 and '"think": false' in reply.json()["error"]


def test_the_openai_layer_gives_the_thinking_as_reasoning(thinker):
    client, name, url = thinker
    expected = client.chat(model=name, messages=ASK, options=QUICK).message
    openai_client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
    message = openai_client.chat.completions.create(model=name, messages=ASK, temperature=0,
                                                   max_tokens=40).choices[0].message
    assert (message.model_extra["reasoning"], message.content) == (expected.thinking, expected.content)
    off = openai_client.chat.completions.create(model=name, messages=ASK, temperature=0, max_tokens=40,
                                                reasoning_effort="none").choices[0].message
    assert "reasoning" not in (off.model_extra or {}) and "8" in off.content
