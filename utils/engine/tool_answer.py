"""A chat with tools, answered as upstream answers it: the engine's text split into content and tool
calls by upstream's own parser (utils/tool_calls.py, Ollama's tools.Parser), one piece at a time as
Ollama's chat handler feeds it, so that the same pieces stream and the same calls complete."""

from __future__ import annotations

from typing import Any

from utils.engine.events import DoneEvent, Event, TextEvent, ToolCallEvent
from utils.tool_calls import ToolCallStream


class ToolAnswer:
    """Turns an answer's events into those of a tool-calling answer (`tag`: the parser's, `tools`: the
    request's). Text the parser holds back and releases at the end rides on the DoneEvent (`tail`),
    as on Ollama's closing message."""

    def __init__(self, tag: str, tools: list[dict[str, Any]]):
        self.stream = ToolCallStream(tag, tools)
        self.content: list[str] = []

    def split(self, event: Event) -> list[Event]:
        if isinstance(event, TextEvent):
            return self._message(self.stream.step(event.text), event)
        if isinstance(event, DoneEvent):
            content, calls = self.stream.finish()
            self.content.append(content)
            return [*([ToolCallEvent(calls)] if calls else []),
                    DoneEvent("".join(self.content), event.stats, tail=content)]
        return [event]

    def _message(self, message: tuple[str, list[dict[str, Any]]] | None, event: TextEvent) -> list[Event]:
        if message is None:  # held back: Ollama sends nothing for this piece
            return []
        content, calls = message
        self.content.append(content)
        return [TextEvent(content, event.origin, event.tokens, event.at_seconds)] if content else [ToolCallEvent(calls)]
