"""What the decoding loop emits. Every consumer (CLI, chat page, charts, store, benchmarks) reads these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from utils.engine.stats import AnswerStats, RoundRecord
from utils.engine.target import ServerError
from utils.errors import SpecError

# Where an emitted piece of text came from: an accepted draft piece, the target's own token after a
# rejected one (correction) or after a whole draft (bonus), or standard generation.
Origin = Literal["draft", "correction", "bonus", "standard"]


@dataclass
class TextEvent:
    text: str
    origin: Origin


@dataclass
class RoundEvent:
    record: RoundRecord
    stats: AnswerStats  # the answer's live statistics: `stats.snapshot(...)` keeps a copy as of now


@dataclass
class ThinkingEvent:
    """Reasoning of a thinking model, as the server split it from the answer (not part of the text)."""

    text: str


@dataclass
class FallbackEvent:
    reason: str


@dataclass
class DoneEvent:
    text: str
    stats: AnswerStats


Event = TextEvent | ThinkingEvent | RoundEvent | FallbackEvent | DoneEvent


class GenerationError(SpecError):
    """The target failed: the answer cannot go on. `partial` is the text emitted before it failed;
    `cause` the server's error, typed (ContextFull, ModelNotFound, ...), where a server failed."""

    def __init__(self, message: str, partial: str, cause: ServerError | None = None):
        super().__init__(message, cause.status if cause else None)
        self.partial, self.cause = partial, cause

    @classmethod
    def of(cls, error: ServerError, partial: str) -> GenerationError:
        return cls(error.message, partial, error)
