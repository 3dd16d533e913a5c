"""What one answer asks for: the prompt or chat, sampling options, limits and a fixed draft length."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from utils.sampling import SamplingOptions


@dataclass
class GenerationRequest:
    prompt: str = ""
    messages: list[dict[str, str]] | None = None  # a chat; else `prompt` is one user message
    raw: bool = False  # send `prompt` as it is, without the chat template
    system: str | None = None
    max_tokens: int = 256  # -1: until the model stops or the context is full
    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.9
    min_p: float = 0.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    k: int | None = None  # a fixed draft length; None lets the controller choose

    def __post_init__(self) -> None:
        problems = [
            message for bad, message in (
                (not self.temperature >= 0 or math.isinf(self.temperature), "temperature must be 0 or more"),
                (self.top_k < 0, "top_k must be 0 or more"),
                (not 0 <= self.top_p <= 1, "top_p must be between 0 and 1"),
                (not 0 <= self.min_p <= 1, "min_p must be between 0 and 1"),
                (self.max_tokens < -1 or self.max_tokens == 0, "max_tokens must be positive, or -1 for no limit"),
                (self.k is not None and not 0 <= self.k <= 64, "k must be between 0 and 64"),
                (self.messages is None and not self.prompt.strip(), "the prompt is empty"),
                (self.messages is not None and not self.messages, "the conversation has no messages"),
            ) if bad
        ]
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def sampling(self) -> SamplingOptions:
        return SamplingOptions(self.temperature, self.top_k, self.top_p, self.min_p, self.seed)
