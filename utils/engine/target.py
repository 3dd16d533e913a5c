"""What the engine asks of a target server, as one interface: `Target`.

Two implementations: `OllamaClient` (client.py), any Ollama or the embedded server over HTTP; and the
embedded server's own in-process target (utils/embedded/http/target.py), which runs a speculative
round in the server's process with no HTTP and no JSON (`cli.py serve`). The engine types its
servers as `Target` and imports neither. What a server answers (`Token`, `Chunk`, `Step`) and how it
fails (`ServerError` and its kinds, which callers branch on) are defined here, for both.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

from utils.errors import SpecError


class ServerError(SpecError):
    """A server that failed, refused or could not be reached; `status` is the HTTP status if any."""

    def __init__(self, message: str, status: int | None = None, host: str = ""):
        super().__init__(message, status)
        self.host = host


class ServerUnreachable(ServerError):
    """No connection could be made (nothing listening, wrong address, connection dropped)."""


class ServerTimeout(ServerError):
    """The server did not answer within the time limit."""


class ModelNotFound(ServerError):
    """The server does not have the model (HTTP 404)."""


class ContextFull(ServerError):
    """The prompt does not fit in the model's context."""


class RequestRefused(ServerError):
    """Any other 4xx: the server refused the request as it was written."""


@dataclass
class Token:
    """One generated token as text, with its log-probability and the top alternatives if asked."""

    text: str
    logprob: float | None = None
    top: dict[str, float] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """False for a token that is only part of a multi-byte character (shown as U+FFFD)."""
        return "\ufffd" not in self.text


@dataclass
class Chunk:
    """One streamed message: its text (whole characters only), its tokens, and on the last one why it
    ended and how many prompt tokens the server counted."""

    text: str
    tokens: list[Token]
    done_reason: str | None
    prompt_tokens: int
    # The last one's time in the server's engine, where it reports one (see Step.engine_s).
    engine_s: float | None = field(default=None, compare=False)


@dataclass
class Step:
    """The answer to a one-token request: the token, or None where the model ended the text."""

    token: Token | None
    done_reason: str
    prompt_tokens: int
    # The server's own timing of the answer, where it reports one (Ollama's total_duration and
    # prompt_eval_duration; in process, the runner's clock). The engine reads neither: they are for
    # measuring what a round pays outside the engine (bench-overhead). Steps of a burst that were
    # evaluated together report the same prompt evaluation. Not part of the answer's value (compare).
    engine_s: float | None = field(default=None, compare=False)
    prompt_eval_s: float | None = field(default=None, compare=False)


def _context_full(message: str) -> bool:
    """A refusal of a prompt longer than the context, in each wording seen: Ollama's Go engine
    ("... exceeds the context length ..."), and since 0.30 llama-server's own JSON error passed on as
    the message's text (`"type": "exceed_context_size_error"`, "exceeds the available context size")."""
    try:
        inner = json.loads(message).get("error", {})
        if isinstance(inner, dict) and inner.get("type") == "exceed_context_size_error":
            return True
    except (ValueError, AttributeError):
        pass
    return "context length" in message or ("exceeds" in message and "context" in message)


class Drain:
    """A raw stream's early end, asked for by the engine. A server in this process (`Target.drains`)
    then ends the stream after the token it is already computing, which is read and used, instead of
    discarding it: otherwise each standard segment left for a draft wastes about one standard token,
    waiting for a computation whose token nobody reads. Over HTTP a stream can only be closed."""

    requested = False


def parse_version(text: str) -> tuple[int, ...]:
    """`/api/version`'s version as numbers: "0.12.11" -> (0, 12, 11)."""
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def refusal(status: int, message: str, host: str = "") -> ServerError:
    """The error for a server's refusal: `status` and its own message, classified by kind."""
    message = message.strip() or f"HTTP {status}"
    if status == 404:
        kind: type[ServerError] = ModelNotFound
    elif _context_full(message):
        kind = ContextFull
    elif 400 <= status < 500:
        kind = RequestRefused
    else:
        kind = ServerError
    return kind(message, status, host)


@dataclass(frozen=True)
class AnswerFormat:
    """A request's `format` ("json" or a JSON schema) mid-answer: its grammar constrains each prompt's
    text from `start` on (where the answer began). A server resumes it only in process (`constrains`):
    over HTTP a grammar always starts where the prompt ends."""

    format: Any
    start: int


def nothing_held(model: str, options: dict[str, Any]) -> AbstractAsyncContextManager[float]:
    """`Target.hold` of a server over HTTP: it keeps its models loaded as its own scheduler decides."""
    return nullcontext(0.0)


class Target(Protocol):
    """A server the engine verifies on (and drafts on, for a draft model): one method per thing the
    engine asks. `url` names the server in the engine's caches; `described` is its cache of models'
    parameters (model_info.py)."""

    url: str
    described: dict[tuple[str, str], Any]
    drains: bool  # whether stream_raw honours `drain` (in process); else the engine closes the stream
    constrains: bool  # whether a `format` resumes mid-answer (in process: AnswerFormat); else only from its start

    async def about(self) -> dict[str, Any]:
        """Ollama's `/api/version`, with the embedded server's own fields (`embedded`, `exact_logprobs`)."""
        ...

    async def version(self) -> tuple[int, ...]: ...

    async def is_embedded(self) -> bool: ...

    async def exact_logprobs(self) -> bool: ...

    async def list_models(self) -> list[dict[str, Any]]: ...

    async def models(self) -> list[str]: ...

    async def show(self, model: str, verbose: bool = False) -> dict[str, Any]: ...

    async def running(self) -> list[dict[str, Any]]: ...

    def stream_answer(self, chat: bool, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """A standard answer exactly as a client asking `/api/chat` or `/api/generate` gets it."""
        ...

    async def render_chat(self, model: str, messages: list[dict[str, Any]], options: dict[str, Any],
                          think: bool | str | None = None, tools: list[dict[str, Any]] | None = None) -> str:
        """The raw prompt the model's chat template makes of `messages` (and `tools`, where given)."""
        ...

    def stream_raw(self, model: str, prompt: str, options: dict[str, Any], top_logprobs: int = 0,
                   format: AnswerFormat | None = None, drain: Drain | None = None) -> AsyncIterator[Chunk]:
        """Raw generation after `prompt`, chunk by chunk; leaving early stops it. With `drain` requested
        (where `drains`), the stream ends after the token already being computed, without a closing
        chunk unless the model itself ended. With `top_logprobs` 0 here and below, a token's own
        log-probability may be left out (None)."""
        ...

    async def next_token(self, model: str, prompt: str, options: dict[str, Any], top_logprobs: int = 0,
                         burst: dict[str, str] | None = None) -> Step:
        """The model's next token after `prompt`: one validator position."""
        ...

    async def next_tokens(self, model: str, prompts: list[str], options: list[dict[str, Any]],
                          top_logprobs: int = 0, format: AnswerFormat | None = None) -> list[Step]:
        """`next_token` for each prompt, evaluated together: one validator burst; with `format` (where
        `constrains`), each token the one the grammar allows after its prompt's answer text."""
        ...

    def hold(self, model: str, options: dict[str, Any]) -> AbstractAsyncContextManager[float]:
        """Keeps `model` loaded as `options` load it while an answer's rounds run, giving the seconds
        that loading it took (0 when it was loaded so): in process, a client asking for another
        context or an unload waits for the answer (its rounds are many requests); over HTTP nothing
        can be held (`nothing_held`), and the engine's requests carry the client's options, so that
        none of them reloads the model."""
        ...

    async def aclose(self) -> None: ...
