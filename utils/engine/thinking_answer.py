"""A thinking answer, split as upstream splits it: the engine's text (the raw continuation of a prompt
rendered with the request's `think`) fed piece by piece to upstream's own thinking parser
(utils/thinking.py, Ollama's thinking.Parser with the model's tags), so that the same reasoning and
content come out, in the same order, whether the pieces were drafted or generated."""

from __future__ import annotations

from utils.engine.events import DoneEvent, Event, TextEvent, ThinkingEvent
from utils.thinking import ThinkingParser


class ThinkingAnswer:
    """Turns an answer's events into those of a thinking answer: reasoning as ThinkingEvents, the rest
    as TextEvents, each with the origin of the piece it came from; the DoneEvent's text is the content.
    `prompt`: the rendered prompt (one that ends with the opening tag starts inside the reasoning)."""

    def __init__(self, tags: tuple[str, str], prompt: str):
        self.parser = ThinkingParser(*tags, prompt=prompt)
        self.content: list[str] = []
        self.seen = 0  # characters of the answer's text fed to the parser
        self.thinking_ends: int | None = None  # where the reasoning ended in the text, once it has
        self.thought = self.parser.state != ThinkingParser.LOOKING  # whether it began with reasoning

    def split(self, event: Event) -> list[Event]:
        if isinstance(event, TextEvent):
            thinking, content = self.parser.add(event.text)
            self.seen += len(event.text)
            self.thought = self.thought or bool(thinking) or self.parser.state == ThinkingParser.STARTED
            if self.thinking_ends is None and not self.parser.thinking:  # the reasoning ended in this piece
                self.thinking_ends = self.seen - len(content) if self.thought else 0
            self.content.append(content)
            counted = event.tokens, event.at_seconds
            return [*([ThinkingEvent(thinking, event.origin, *counted)] if thinking else []),
                    *([TextEvent(content, event.origin, *counted)] if content else [])]
        if isinstance(event, DoneEvent):  # what the parser still holds (a partial tag, whitespace) is dropped
            return [DoneEvent("".join(self.content), event.stats, event.tail)]
        return [event]

    def reasoning_characters(self) -> int:
        """How much of the answer's text was reasoning (tags included): all of it while still thinking."""
        return self.seen if self.thinking_ends is None else self.thinking_ends
