"""What one answer asks for: the prompt or chat, sampling options, limits and a fixed draft length."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from utils.engine.config import K_LIMIT
from utils.sampling import GREEDY, SamplingOptions


@dataclass
class GenerationRequest:
    prompt: str = ""
    messages: list[dict[str, str]] | None = None  # a chat; else `prompt` is one user message
    raw: bool = False  # send `prompt` as it is, without the chat template
    system: str | None = None
    options: SamplingOptions = GREEDY  # how the target samples; its seed also seeds the engine's draws
    max_tokens: int = 256  # -1: until the model stops or the context is full
    stop: list[str] = field(default_factory=list)
    k: int | None = None  # a fixed draft length; None lets the controller choose
    # Ollama's `format` ("json" or a JSON schema): the server constrains the whole answer with a grammar,
    # which speculation does not apply, so such an answer is generated standard (the stats say why).
    format: str | dict[str, Any] | None = None

    def __post_init__(self) -> None:
        problems = [
            message for bad, message in (
                (self.max_tokens < -1 or self.max_tokens == 0, "max_tokens must be positive, or -1 for no limit"),
                (self.k is not None and not 0 <= self.k <= K_LIMIT, f"k must be between 0 and {K_LIMIT}"),
                (self.messages is None and not self.prompt.strip(), "the prompt is empty"),
                (self.messages is not None and not self.messages, "the conversation has no messages"),
            ) if bad
        ]
        if problems:
            raise ValueError("; ".join(problems))
