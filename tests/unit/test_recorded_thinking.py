"""Thinking split as a real Ollama 0.32.15 split it (tests/data/ollama-recorded/ 37-62: the stand-in
thinking model with its GGUF's Jinja template, and with a Go template using `.Thinking`), and what the
engine plans for each from that server's own /api/show (replayed by tests/support/recorded.py, a
stand-in named as such).

The model's raw text is in the recordings too: with the Jinja template Ollama splits nothing, so 39's
streamed `content` is the model's own text, one token a message, after a prompt that ends with
`<think>\\n`. The Go template's prompt (57) ends before that tag, which the model then writes itself:
the same model, greedy, continues it with the same text.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from tests.support.recorded import RecordedOllama, load
from utils.engine.client import OllamaClient
from utils.engine.config import EngineConfig
from utils.engine.decoder import SpeculativeDecoder
from utils.engine.drafters.lookup import PromptLookupDrafter
from utils.engine.events import DoneEvent, TextEvent, ThinkingEvent
from utils.engine.request import GenerationRequest
from utils.engine.stats import AnswerStats
from utils.engine.thinking_answer import ThinkingAnswer
from utils.thinking import ThinkingParser, ollama_tags

JINJA, GO = "stand-in-thinker", "stand-in-thinker-go"
QUESTION = [{"role": "user", "content": "What is 7 + 6?"}]


def raw_tokens() -> list[str]:
    """The model's text for the question, token by token, as Ollama streamed it unsplit (39)."""
    return [message["message"]["content"] for message in load("39-thinker-chat-think-absent-stream").json()
            if not message["done"]]


def go_template() -> str:
    return load("50-show-thinker").json()["template"]


def test_tags_are_inferred_from_a_go_template_and_not_from_a_jinja_one():
    assert ollama_tags(go_template()) == ("<think>", "</think>")
    assert ollama_tags(load("37-show-thinker").json()["template"]) is None


def test_a_jinja_templates_reasoning_stays_in_the_content_as_ollama_returns_it():
    """38: the whole text, `</think>` and all, is the content; nothing is split."""
    assert "".join(raw_tokens()) == load("38-thinker-chat-think-absent").json()["message"]["content"]


@pytest.mark.parametrize("whole, streamed", [("51-thinker-chat-think-absent", "52-thinker-chat-think-absent-stream"),
                                             ("53-thinker-chat-think-true", "54-thinker-chat-think-true-stream")])
def test_the_split_of_the_models_text_is_ollamas_message_by_message(whole, streamed):
    """The engine's split (ThinkingAnswer over the model's pieces) gives Ollama's streamed messages,
    each (thinking, content) as Ollama sent it, and its whole answer."""
    prompt = load("57-thinker-chat-render-only").json()["_debug_info"]["rendered_template"]
    assert not prompt.rstrip().endswith("<think>")  # the model writes the tag itself here
    answer = ThinkingAnswer(ollama_tags(go_template()), prompt)
    ours = []
    for piece in ["<think>", "\n", *raw_tokens()]:
        events = answer.split(TextEvent(piece, "draft"))
        if events:
            ours.append(("".join(e.text for e in events if isinstance(e, ThinkingEvent)),
                         "".join(e.text for e in events if isinstance(e, TextEvent))))
    done = answer.split(DoneEvent("raw text", AnswerStats(mode="speculative", target=GO)))
    ollamas = [(m["message"].get("thinking", ""), m["message"]["content"]) for m in load(streamed).json()
               if not m["done"]]
    assert ours == ollamas
    message = load(whole).json()["message"]
    assert ("".join(t for t, _ in ours), done[0].text) == (message["thinking"], message["content"])


def test_think_false_renders_the_closed_block_and_the_answer_is_all_content():
    """55: with `think: false` Ollama renders an empty closed block and splits nothing: the engine
    plans no split (thinking is off), so its text is the content."""
    assert load("55-thinker-chat-think-false").json()["message"] == {"role": "assistant", "content": "7 + 6 = 13."}
    parser = ThinkingParser(*ollama_tags(go_template()), prompt="...<think>\n\n</think>\n\n")
    assert parser.add("7 + 6 = 13.") == ("", "7 + 6 = 13.")  # and were it split, the same


@pytest.fixture
async def ollama() -> AsyncIterator[RecordedOllama]:
    with RecordedOllama() as replay:
        yield replay


TAGS = ("<think>", "</think>")


@pytest.mark.parametrize("model, think, tags", [(GO, None, TAGS), (GO, True, TAGS), (GO, "high", TAGS),
                                                (GO, False, None), (JINJA, None, None), (JINJA, True, None)])
async def test_the_engine_speculates_each_as_ollama_splits_it(ollama, model, think, tags) -> None:
    """From the real /api/show (37, 50): a thinking answer is speculated, split by the Go template's tags,
    and left whole for the Jinja template, as Ollama leaves it; nothing goes upstream for `thinking`."""
    target = OllamaClient(ollama.url)
    try:
        decoder = SpeculativeDecoder(target, model, PromptLookupDrafter(set()), EngineConfig())
        plan = await decoder.plan(GenerationRequest(messages=QUESTION, options={"temperature": 0}, think=think))
    finally:
        await target.aclose()
    assert (plan.thinking_tags, plan.method, plan.reason) == (tags, "greedy", None)


async def test_a_built_in_parser_or_format_while_thinking_goes_upstream_with_a_reason(ollama) -> None:
    target = OllamaClient(ollama.url)
    try:
        decoder = SpeculativeDecoder(target, GO, PromptLookupDrafter(set()), EngineConfig())
        plan = await decoder.plan(GenerationRequest(messages=QUESTION, options={"temperature": 0}, format="json"))
        (key, info), = target.described.items()  # as /api/show describes a model with `PARSER qwen3`
        target.described[key] = replace(info, thinking_parser="Ollama parses this model's answers with its "
                                                              "built-in parser qwen3")
        parsed = await decoder.plan(GenerationRequest(messages=QUESTION, options={"temperature": 0}))
    finally:
        await target.aclose()
    assert (plan.code, plan.by_upstream) == ("thinking", True) and "second pass" in plan.reason
    assert (parsed.code, parsed.by_upstream) == ("thinking", True) and "built-in parser qwen3" in parsed.reason
