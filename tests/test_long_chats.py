"""Chats and prompts longer than the context: truncated as Ollama truncates them, reported, never a 400.

smollm2:135m with num_ctx 512; the context goes back to the default before each test ends (the tests
share one server, and a different num_ctx reloads the model).
"""

from __future__ import annotations

import json

import httpx
import ollama
import pytest

SMALL = "smollm2:135m"
NUM_CTX = 512
DEFAULT_NUM_CTX = 4096
SYSTEM = {"role": "system", "content": "You are Bob, a terse assistant. Always sign your answers with '-- Bob'."}


def long_chat(turns: int = 60) -> list[dict[str, str]]:
    """A system message and `turns` turns, about three times NUM_CTX tokens in all."""
    messages = [SYSTEM]
    for i in range(turns - 1):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append({"role": role, "content": f"Turn {i}: a remark about the number {i}, and a few facts "
                                                  "about it that nobody asked for, thank you."})
    messages.append({"role": "user", "content": "What is the capital of France?"})
    return messages


@pytest.fixture
def small_context(server_url):
    yield {"num_ctx": NUM_CTX, "temperature": 0, "num_predict": 24}
    ollama.Client(host=server_url).generate(model=SMALL, prompt="hi", raw=True,
                                            options={"num_ctx": DEFAULT_NUM_CTX, "num_predict": 1})


def test_a_sixty_turn_chat_three_times_the_context_keeps_answering_and_says_so(server_url, small_context):
    messages = long_chat()
    with httpx.Client(base_url=server_url, timeout=300) as http:
        everything = http.post("/api/chat", json={"model": SMALL, "messages": messages, "_debug_render_only": True,
                                                  "options": {"num_ctx": DEFAULT_NUM_CTX}}).json()
        whole_prompt = everything["_debug_info"]["rendered_template"]
        rendered = http.post("/api/chat", json={"model": SMALL, "messages": messages, "_debug_render_only": True,
                                                "options": small_context}).json()["_debug_info"]["rendered_template"]
        answer = http.post("/api/chat", json={"model": SMALL, "messages": messages, "stream": False,
                                              "options": small_context})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        streamed = [json.loads(line) for line in http.post("/api/chat", json={
            "model": SMALL, "messages": messages, "options": small_context}).text.splitlines()]

    # What was kept: the system message, then the newest turns, ending with the question.
    assert rendered.startswith("<|im_start|>system\n" + SYSTEM["content"])
    assert rendered.endswith("What is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    assert "Turn 0:" not in rendered and "Turn 57:" in rendered and len(rendered) < len(whole_prompt) / 2
    kept = rendered.count("<|im_start|>") - 2  # less the system message and the assistant's opening
    assert body["truncated"] == {"messages": 60 - kept, "tokens": 0}
    assert body["prompt_eval_count"] <= NUM_CTX - NUM_CTX // 4 and body["message"]["content"].strip()
    assert body["done_reason"] in ("stop", "length") and body["eval_count"] > 0
    assert streamed[-1]["done"] and streamed[-1]["truncated"] == body["truncated"]
    assert "".join(m["message"]["content"] for m in streamed) == body["message"]["content"]

    # Clients that know nothing of the extra field read the answer as usual.
    client_answer = ollama.Client(host=server_url).chat(model=SMALL, messages=messages, options=small_context)
    assert client_answer.message.content == body["message"]["content"]


def test_the_chat_goes_on_turn_after_turn_past_the_context(server_url, small_context):
    client = ollama.Client(host=server_url)
    messages = long_chat(40)[:-1]
    for question in ("What is the capital of France?", "And of Italy?", "And of Spain?"):
        messages.append({"role": "user", "content": question})
        answer = client.chat(model=SMALL, messages=messages, options=small_context)
        assert answer.message.content.strip() and answer.prompt_eval_count <= NUM_CTX
        messages.append({"role": "assistant", "content": answer.message.content})


def test_a_prompt_longer_than_the_context_is_cut_in_the_middle_or_refused_when_asked(server_url, small_context):
    prompt = "Start here. " + " ".join(f"word{i}" for i in range(900)) + " The end."
    with httpx.Client(base_url=server_url, timeout=300) as http:
        cut = http.post("/api/generate", json={"model": SMALL, "prompt": prompt, "raw": True, "stream": False,
                                               "options": small_context})
        assert cut.status_code == 200, cut.text
        body = cut.json()
        assert body["truncated"]["messages"] == 0 and body["truncated"]["tokens"] > 0
        assert body["prompt_eval_count"] < NUM_CTX and body["eval_count"] > 0
        refused = http.post("/api/generate", json={"model": SMALL, "prompt": prompt, "raw": True, "stream": False,
                                                   "truncate": False, "options": small_context})
        assert refused.status_code == 400 and "exceeds the context length" in refused.json()["error"]
        short = http.post("/api/generate", json={"model": SMALL, "prompt": "Hello", "stream": False,
                                                 "options": small_context}).json()
        assert "truncated" not in short  # only an answer that left something out says so
