"""One answer from start to end, for callers that are not streaming UIs (the CLI, benchmarks, tests)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from utils.engine.events import DoneEvent, TextEvent, ThinkingEvent, ToolCallEvent
from utils.engine.request import GenerationRequest
from utils.engine.served import Decoder


async def collect(decoder: Decoder, request: GenerationRequest,
                  echo: Callable[[str], None] | None = None,
                  echo_thinking: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run `request` to the end: {"text", "thinking", "tool_calls", "mode", "pieces": [[text, origin], ...],
    "thinking_pieces" (the same for the reasoning), "stats"}."""
    pieces: list[list[str]] = []
    thinking_pieces: list[list[str]] = []
    calls: list[dict[str, Any]] = []
    async for event in decoder.stream(request):
        if isinstance(event, ThinkingEvent):
            thinking_pieces.append([event.text, event.origin])
            if echo_thinking:
                echo_thinking(event.text)
        elif isinstance(event, ToolCallEvent):
            calls += event.calls
        elif isinstance(event, TextEvent):
            pieces.append([event.text, event.origin])
            if echo:
                echo(event.text)
        elif isinstance(event, DoneEvent):
            return {"text": event.text, "thinking": "".join(text for text, _ in thinking_pieces), "tool_calls": calls,
                    "mode": event.stats.mode, "pieces": pieces, "thinking_pieces": thinking_pieces,
                    "stats": event.stats.model_dump()}
    raise RuntimeError("the decoder ended without a result")
