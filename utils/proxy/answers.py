"""A speculative answer in Ollama's response shape: NDJSON chunks while streaming, one JSON object
otherwise, with the `*_duration` fields in nanoseconds for the whole answer and one extra object,
`speculative`, with the engine's statistics (clients ignore fields they do not know)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from utils.api.http import ndjson_line, now
from utils.engine.decoder import SpeculativeDecoder
from utils.engine.events import DoneEvent, GenerationError, TextEvent, ThinkingEvent, ToolCallEvent
from utils.engine.planning import Plan
from utils.engine.request import GenerationRequest
from utils.engine.stats import AnswerStats

NS = 1_000_000_000


def _text_fields(text: str, chat: bool, calls: list[dict[str, Any]] | None = None,
                 thinking: str = "") -> dict[str, Any]:
    extra = {"thinking": thinking} if thinking else {}
    if not chat:
        return {"response": text, **extra}
    return {"message": {"role": "assistant", "content": text, **extra, **({"tool_calls": calls} if calls else {})}}


def speculative_summary(stats: AnswerStats) -> dict[str, Any]:
    """The extra object: what speculation did for this answer."""
    return {
        "drafter": stats.drafter, "method": stats.method, "drafts": stats.drafts,
        "draft_tokens": stats.drafted_tokens, "accepted_tokens": stats.accepted_tokens,
        "acceptance_rate": round(stats.acceptance_rate, 4),
        "mean_acceptance_length": round(stats.mean_acceptance_length, 4),
        "per_position_acceptance": [round(rate, 4) for rate in stats.per_position_acceptance],
        "standard_tokens": stats.standard_tokens, "tokens_per_second": round(stats.tokens_per_second, 2),
        "fallbacks": [fallback.reason for fallback in stats.fallbacks],
    }


def final_fields(model: str, stats: AnswerStats, text: str, chat: bool) -> dict[str, Any]:
    """The closing object's fields; `text` is the whole answer (non-streamed), or what only the closing
    message carries (streamed: "", or the text a tool-call parser held back to the end)."""
    first = stats.time_to_first_token_s or 0.0
    return {
        "model": model, "created_at": now(), **_text_fields(text, chat), "done": True,
        "done_reason": stats.done_reason or "stop",
        "total_duration": int((stats.load_seconds + stats.total_seconds) * NS),
        "load_duration": int(stats.load_seconds * NS),
        "prompt_eval_count": stats.prompt_tokens, "prompt_eval_duration": int(first * NS),
        "eval_count": stats.output_tokens, "eval_duration": int(max(stats.total_seconds - first, 0.0) * NS),
        "speculative": speculative_summary(stats),
    }


Answer = AsyncIterator[TextEvent | ThinkingEvent | ToolCallEvent | DoneEvent]


async def events(decoder: SpeculativeDecoder, request: GenerationRequest, plan: Plan | None = None) -> Answer:
    """The decoder's text, thinking, tool-call and final events (rounds and fallbacks are in the final
    statistics)."""
    async for event in decoder.stream(request, plan):
        if isinstance(event, (TextEvent, ThinkingEvent, ToolCallEvent, DoneEvent)):
            yield event


async def messages(model: str, chat: bool, stream: Answer, on_done: Any) -> AsyncIterator[dict[str, Any]]:
    """Ollama's answer messages, one per text, thinking or tool-call event and a closing one; a failure
    after the first ends it with an `{"error"}` message, as Ollama does. `on_done(stats)` gets the final
    statistics."""
    try:
        async for event in stream:
            if isinstance(event, TextEvent):
                yield {"model": model, "created_at": now(), **_text_fields(event.text, chat), "done": False}
            elif isinstance(event, ThinkingEvent):
                yield {"model": model, "created_at": now(), **_text_fields("", chat, thinking=event.text),
                       "done": False}
            elif isinstance(event, ToolCallEvent):
                yield {"model": model, "created_at": now(), **_text_fields("", chat, event.calls), "done": False}
            else:
                on_done(event.stats)
                yield final_fields(model, event.stats, event.tail, chat)
    except GenerationError as error:
        yield {"error": error.message}


async def joined(answer: AsyncIterator[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """A whole answer from its messages: (text, closing message, whose chat message, or itself for
    /api/generate, has the answer's thinking and tool calls); GenerationError if it failed."""
    text: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    last: dict[str, Any] | None = None
    async for message in answer:
        if "error" in message:
            raise GenerationError(message["error"], "".join(text))
        part = message.get("message")
        text.append(part["content"] if part is not None else message["response"])
        thinking.append((part or message).get("thinking") or "")
        calls += (part or {}).get("tool_calls") or []
        if message.get("done"):
            last = message
    assert last is not None, "an answer ends with a closing message"
    if thought := "".join(thinking):
        (last.get("message") or last)["thinking"] = thought
    if calls:
        last["message"]["tool_calls"] = calls
    return "".join(text), last


async def ndjson(answer: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    async for message in answer:
        yield ndjson_line(message)
