"""Ollama's request bodies, with its defaults and its validation (api/types.go)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from utils.api.http import ApiError
from utils.sampling import MIN_TEMPERATURE, SamplingOptions

MAX_TOP_LOGPROBS = 20


class Options(BaseModel):
    model_config = ConfigDict(extra="allow")  # Ollama accepts (and ignores) options it does not use

    num_predict: int = -1
    temperature: float = Field(0.8, ge=0)
    top_k: int = Field(40, ge=0)
    top_p: float = Field(0.9, ge=0, le=1)
    min_p: float = Field(0.0, ge=0, le=1)
    seed: int | None = None
    stop: list[str] | str | None = None
    num_ctx: int | None = Field(None, ge=16, le=131072)

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, values: Any) -> Any:
        """Ollama skips an option sent as null (api.Options.FromMap); LangChain sends its unset ones so."""
        return {k: v for k, v in values.items() if v is not None} if isinstance(values, dict) else values

    def sampling(self) -> SamplingOptions:
        seed = None if self.seed is None or self.seed < 0 else self.seed
        # Logits divided by a temperature this small overflow to inf - inf = NaN (a 500); it is greedy.
        temperature = self.temperature if self.temperature >= MIN_TEMPERATURE else 0.0
        return SamplingOptions(temperature, self.top_k, self.top_p, self.min_p, seed)

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def under(self, parameters: dict[str, Any]) -> Options:
        """These options over a model's Modelfile parameters, which are over Ollama's defaults (its
        api.Options.FromMap, model's then request's): only what the client sent overrides, so a sent
        `stop` replaces the model's list and an unsent temperature is the model's."""
        if not parameters:
            return self  # every catalogue model: nothing to merge on the validator's hot path
        return Options.model_validate({**parameters, **self.model_dump(exclude_unset=True)})


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str = ""

    @model_validator(mode="after")
    def _calls_are_objects(self) -> Message:
        """`tool_calls` is a list of objects, or Ollama's JSON decoding refuses the request (400); left
        an extra field, not declared, so a message without calls reaches the template without the key."""
        calls = (self.model_extra or {}).get("tool_calls")
        if calls is not None and not (isinstance(calls, list) and all(isinstance(c, dict) for c in calls)):
            raise ValueError("tool_calls must be a list of objects")
        return self


class Common(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    stream: bool = True
    options: Options = Field(default_factory=Options)
    logprobs: bool = False
    top_logprobs: int = 0
    keep_alive: Any = None
    format: Any = None
    truncate: bool | None = None  # False: a prompt longer than the context is refused, not truncated
    debug_render_only: bool = Field(False, alias="_debug_render_only")

    def check(self) -> None:
        """What Ollama refuses beyond the field types."""
        if not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise ApiError(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}", 400)


class GenerateBody(Common):
    prompt: str = ""
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: bool = False
    suffix: str | None = None

    def check(self) -> None:
        super().check()
        if self.raw and (self.template or self.system or self.context):
            raise ApiError("raw mode does not support template, system, or context", 400)


class ChatBody(Common):
    messages: list[Message] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None


class ShowBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = ""
    name: str = ""  # the older spelling
    verbose: bool = False
