"""What the decoding loop emits. Every consumer (CLI, chat page, charts, store, benchmarks) reads these.

They also travel: `cli.py serve` streams an answer's events to a client that asks for them
(`X-Speculation-Events: on`, utils/proxy/event_stream.py) as JSON objects (`to_wire`), and the
client reads them back (`WireEvents`), so the app shows an answer made in the server as one made here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from utils.engine.stats import AnswerStats, RoundRecord
from utils.engine.target import ServerError
from utils.errors import SpecError

# Where an emitted piece of text came from: an accepted draft piece, the target's own token after a
# rejected one (correction) or after a whole draft (bonus), or standard generation.
Origin = Literal["draft", "correction", "bonus", "standard"]


@dataclass
class TextEvent:
    """A piece of the answer's text. `tokens`: the answer's output tokens (reasoning included) whose text
    has been emitted once this piece is, and `at_seconds` when (since the request): what a reader has
    seen so far, counted, between two rounds' statistics too (0: not counted). Events are equal when
    their text and origin are."""

    text: str
    origin: Origin
    tokens: int = field(default=0, compare=False)
    at_seconds: float = field(default=0.0, compare=False)


@dataclass
class RoundEvent:
    record: RoundRecord
    stats: AnswerStats  # the answer's live statistics: `stats.snapshot(...)` keeps a copy as of now


@dataclass
class ThinkingEvent:
    """Reasoning of a thinking model, split from the answer as upstream splits it (utils/thinking.py;
    not part of the text), with where it came from, as a TextEvent's."""

    text: str
    origin: Origin = "standard"
    tokens: int = field(default=0, compare=False)  # as a TextEvent's
    at_seconds: float = field(default=0.0, compare=False)


@dataclass
class ToolCallEvent:
    """Tool calls the answer made, complete, as upstream parses them from its text (utils/tool_calls.py),
    in Ollama's shape: {"function": {"index", "name", "arguments"}}. Their text is not content."""

    calls: list[dict[str, Any]]


@dataclass
class FallbackEvent:
    reason: str


@dataclass
class DoneEvent:
    text: str
    stats: AnswerStats
    tail: str = ""  # the part of `text` that comes only now, on the closing message (tool_answer.py)


Event = TextEvent | ThinkingEvent | ToolCallEvent | RoundEvent | FallbackEvent | DoneEvent


class GenerationError(SpecError):
    """The target failed: the answer cannot go on. `partial` is the text emitted before it failed;
    `cause` the server's error, typed (ContextFull, ModelNotFound, ...), where a server failed."""

    def __init__(self, message: str, partial: str, cause: ServerError | None = None):
        super().__init__(message, cause.status if cause else None)
        self.partial, self.cause = partial, cause

    @classmethod
    def of(cls, error: ServerError, partial: str) -> GenerationError:
        return cls(error.message, partial, error)


def to_wire(event: Event) -> dict[str, Any]:
    """An event as a JSON object. A round's statistics leave out the rounds so far (the reader keeps
    them): each line stays small however long the answer."""
    if isinstance(event, TextEvent | ThinkingEvent):
        return {"type": "text" if isinstance(event, TextEvent) else "thinking", "text": event.text,
                "origin": event.origin, "tokens": event.tokens, "at_seconds": event.at_seconds}
    if isinstance(event, ToolCallEvent):
        return {"type": "tool_calls", "calls": event.calls}
    if isinstance(event, FallbackEvent):
        return {"type": "fallback", "reason": event.reason}
    if isinstance(event, RoundEvent):
        return {"type": "round", "record": event.record.model_dump(),
                "stats": event.stats.model_dump(exclude={"rounds", "k_history"})}
    return {"type": "done", "text": event.text, "tail": event.tail, "stats": event.stats.model_dump()}


class WireEvents:
    """One answer's events again, from `to_wire`'s objects in the order they came: each round's
    statistics with the rounds read so far."""

    def __init__(self) -> None:
        self.rounds: list[RoundRecord] = []

    def read(self, data: dict[str, Any]) -> Event:
        kind = data.get("type")
        if kind == "text":
            return TextEvent(str(data["text"]), data["origin"], *_counted(data))
        if kind == "thinking":
            return ThinkingEvent(str(data["text"]), data.get("origin") or "standard", *_counted(data))
        if kind == "tool_calls":
            return ToolCallEvent(list(data["calls"]))
        if kind == "fallback":
            return FallbackEvent(str(data["reason"]))
        if kind == "round":
            record = RoundRecord.model_validate(data["record"])
            self.rounds.append(record)
            stats = AnswerStats.model_validate({**data["stats"], "rounds": list(self.rounds),
                                                "k_history": [each.k for each in self.rounds]})
            return RoundEvent(record, stats)
        if kind == "done":
            return DoneEvent(str(data["text"]), AnswerStats.model_validate(data["stats"]), str(data.get("tail") or ""))
        raise ValueError(f"not an engine event: {data!r}")


def _counted(data: dict[str, Any]) -> tuple[int, float]:
    """A text's count so far and when, where the sender gave them."""
    return int(data.get("tokens") or 0), float(data.get("at_seconds") or 0.0)
