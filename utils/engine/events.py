"""What the decoding loop emits. Every consumer (CLI, chat page, charts, store, benchmarks) reads these."""

from __future__ import annotations

from dataclasses import dataclass

from utils.engine.stats import AnswerStats, RoundRecord


@dataclass
class TextEvent:
    text: str
    origin: str  # "draft" (accepted draft), "correction", "bonus" or "standard"


@dataclass
class RoundEvent:
    record: RoundRecord
    stats: AnswerStats  # the answer's live statistics: `stats.snapshot(...)` keeps a copy as of now


@dataclass
class FallbackEvent:
    reason: str


@dataclass
class DoneEvent:
    text: str
    stats: AnswerStats


Event = TextEvent | RoundEvent | FallbackEvent | DoneEvent


class GenerationError(Exception):
    """The target failed: the answer cannot go on. `partial` is the text emitted before it failed."""

    def __init__(self, message: str, partial: str):
        super().__init__(message)
        self.message, self.partial = message, partial
