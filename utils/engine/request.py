"""What one answer asks for: the prompt or chat, the client's options, limits and a fixed draft length."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from utils.engine.config import K_LIMIT
from utils.sampling import SamplingOptions

# Set by the engine for each request it makes (the answer's limit, and the token count of a check).
ENGINE_OPTIONS = ("num_predict",)


@dataclass
class GenerationRequest:
    prompt: str = ""
    # A chat (Ollama's messages: role, content, and an assistant's tool_calls or a tool's result);
    # else `prompt` is one user message.
    messages: list[dict[str, Any]] | None = None
    raw: bool = False  # send `prompt` as it is, without the chat template
    system: str | None = None
    # Ollama `options` exactly as the client gave them (a SamplingOptions is written out as such). They
    # go with every request the engine makes, so upstream merges them with the model's own parameters
    # as it would for a direct request; nothing is added (a `num_ctx` the client did not send would
    # make Ollama reload the model). Their `seed` also seeds the engine's own draws.
    options: dict[str, Any] = field(default_factory=lambda: {"temperature": 0})
    max_tokens: int = 256  # -1: until the model stops or the context is full
    stop: list[str] | None = None  # None: the model's own stop strings, if it has any (as Ollama)
    k: int | None = None  # a fixed draft length; None lets the controller choose
    # Ollama's `format` ("json" or a JSON schema): the server constrains the whole answer with a grammar,
    # which speculation does not apply, so such an answer is generated standard (the stats say why).
    format: str | dict[str, Any] | None = None
    # Ollama's `think` (true, false, or a level): None leaves it to the model (a thinking model thinks).
    think: bool | str | None = None
    tools: list[dict[str, Any]] | None = None  # a chat's tools, rendered into its prompt by the template

    def __post_init__(self) -> None:
        if isinstance(self.options, SamplingOptions):  # accepted for convenience, kept as Ollama's dict
            self.options = self.options.to_ollama()
        self.options = {key: value for key, value in self.options.items() if key not in ENGINE_OPTIONS}
        if self.stop:  # sent on as the client's own: it replaces the model's stop strings (none: kept)
            self.options["stop"] = list(self.stop)
        # The sampling options given are checked here, before any request (the rest are upstream's).
        given = {key: self.options[key] for key in ("temperature", "top_k", "top_p", "min_p")
                 if self.options.get(key) is not None}
        SamplingOptions(**given)  # ValueError: "temperature must be 0 or more", ...
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

    @property
    def raw_options(self) -> dict[str, Any]:
        """The options of the engine's own raw requests: the client's, with `stop` empty. The engine
        applies the answer's stop strings itself (the client's, else the model's); a server that applied
        them too would hold back a token's text where it might begin one, so that a one-token request
        answers part of its token and a segment ends short of what was generated."""
        return {**self.options, "stop": []}

    def as_ollama(self, model: str) -> tuple[bool, dict[str, Any]]:
        """(chat, body): this request as a client would send it to `/api/chat` (chat) or `/api/generate`."""
        body: dict[str, Any] = {"model": model, "options": {**self.options, "num_predict": self.max_tokens}}
        if self.think is not None:
            body["think"] = self.think
        if self.format is not None:
            body["format"] = self.format
        if self.tools:
            body["tools"] = self.tools
        if self.messages is not None:
            return True, {**body, "messages": self.messages}
        return False, {**body, "prompt": self.prompt, "raw": self.raw,
                       **({"system": self.system} if self.system else {})}
