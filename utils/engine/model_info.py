"""What a server's model brings to a request before the client's options: its own parameters
(a Modelfile's `PARAMETER`s), its capabilities, and the context it is loaded with.

Ollama merges a request's options as its defaults < the model's parameters < the request
(server/routes.go `modelOptions`). The engine never sends options the client did not send, so
upstream applies the same merge to every request the engine makes; the engine merges them too, only
to know what upstream will do (greedy or sampled, where the answer stops), never to send them.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from utils.engine.target import ServerError, Target
from utils.sampling import MIN_TEMPERATURE, SamplingOptions
from utils.tool_calls import builtin_parser, builtin_parser_reason

DEFAULTS = SamplingOptions()  # Ollama's own (api/types.go DefaultOptions)
# Parameters the engine does not need to know: they change where or how fast the model runs, not
# which token it picks (upstream applies them to every request the engine makes, as to a direct one).
PLACEMENT = {"num_ctx", "num_batch", "num_gpu", "main_gpu", "num_thread", "use_mmap", "use_mlock", "numa",
             "num_keep", "low_vram", "vocab_only", "f16_kv", "logits_all"}
# Parameters that decide the token and that speculation keeps exact (the engine reads them).
SAMPLING = {"temperature", "top_k", "top_p", "min_p", "seed", "num_predict", "stop"}


def parse_parameters(text: str) -> dict[str, Any]:
    """`/api/show` `parameters` (one `name value` line each, strings quoted, `stop` repeated) as a
    dict: numbers as numbers, `stop` as a list."""
    found: dict[str, Any] = {}
    for line in text.splitlines():
        name, _, value = line.strip().partition(" ")
        value = value.strip()
        if not name or not value:
            continue
        if value.startswith('"'):
            try:
                value = json.loads(value)
            except ValueError:
                value = " ".join(shlex.split(value))
        else:
            value = _number(value)
        if name == "stop":
            found.setdefault("stop", []).append(value)
        else:
            found[name] = value
    return found


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text, text)


@dataclass(frozen=True)
class ModelInfo:
    """One model as its server describes it (`/api/show`, `/api/tags`)."""

    name: str
    digest: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    capabilities: tuple[str, ...] = ()
    family: str = ""  # `details.family`: the architecture Ollama's scheduler decides slots by
    template: str = ""  # its chat template, where upstream's tool-call parser finds its tag
    # Why upstream reads this model's tool calls with a parser of its own (utils/tool_calls.py), or None.
    tool_parser: str | None = None
    # Why upstream splits this model's thinking with a built-in parser (not utils/thinking.py's), or None.
    thinking_parser: str | None = None

    @property
    def thinks(self) -> bool:
        """Thinking-capable: since Ollama 0.12.4 such a model thinks unless asked `think: false`."""
        return "thinking" in self.capabilities

    def merged(self, sent: dict[str, Any]) -> dict[str, Any]:
        """The options upstream applies to a request that sent `sent`: the model's parameters under
        the request's (a list such as `stop` is replaced, not joined, as Ollama's `FromMap` does)."""
        return {**self.parameters, **{key: value for key, value in sent.items() if value is not None}}

    def sampling(self, sent: dict[str, Any]) -> SamplingOptions:
        """How upstream picks tokens for a request that sent `sent`."""
        options = self.merged(sent)
        temperature = float(options.get("temperature", DEFAULTS.temperature))
        seed = options.get("seed")
        return SamplingOptions(
            temperature=temperature if temperature >= MIN_TEMPERATURE else 0.0,
            top_k=int(options.get("top_k", DEFAULTS.top_k)),
            top_p=float(options.get("top_p", DEFAULTS.top_p)),
            min_p=float(options.get("min_p", DEFAULTS.min_p)),
            seed=int(seed) if isinstance(seed, (int, float)) and seed >= 0 else None,
        )

    def stops(self, sent: dict[str, Any]) -> list[str]:
        stop = self.merged(sent).get("stop")
        return [stop] if isinstance(stop, str) else list(stop or [])

    def inexact_parameters(self) -> list[str]:
        """The model's own parameters that decide tokens in ways speculation does not keep exact
        (penalties, mirostat, ...): an answer of such a model is generated standard."""
        return sorted(set(self.parameters) - PLACEMENT - SAMPLING)


async def model_info(server: Target, model: str, cache: dict[tuple[str, str], ModelInfo]) -> ModelInfo:
    """`model` on `server`, read once per digest: a model created again under the same name (new
    parameters) has a new digest, so `/api/tags` tells when the cached `/api/show` is stale."""
    digests = {entry.get("model") or entry.get("name"): entry.get("digest", "") for entry in await server.list_models()}
    digest = digests.get(model) or digests.get(f"{model}:latest") or ""
    if (cached := cache.get((model, digest))) is not None:
        return cached
    shown = await server.show(model)  # Ollama's 404 for an unknown model
    info = ModelInfo(model, digest, parse_parameters(str(shown.get("parameters") or "")),
                     tuple(shown.get("capabilities") or ()), str((shown.get("details") or {}).get("family") or ""),
                     str(shown.get("template") or ""), builtin_parser_reason(shown), builtin_parser(shown))
    cache[(model, digest)] = info
    return info


async def loaded_context(server: Target, model: str) -> int | None:
    """The context `model` is loaded with (`/api/ps` `context_length`), None when unknown: not
    loaded, or an Ollama older than the field. Only read, never set: the engine sends no num_ctx the
    client did not send, since Ollama reloads a runner whose num_ctx changes."""
    try:
        running = await server.running()
    except ServerError:
        return None
    for entry in running:
        if model in (entry.get("model"), entry.get("name")) or f"{model}:latest" == entry.get("model"):
            length = entry.get("context_length")
            return int(length) if isinstance(length, int) and length > 0 else None
    return None
