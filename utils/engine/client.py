"""A thin async layer over the official `ollama` client: what the speculative engine asks of a server.

Every failure becomes one exception type, `ServerError`, carrying the server's own message, so the
engine can fall back or report without knowing about httpx or ollama's exception classes.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import httpx
import ollama

# Since these Ollama releases: raw prompts of a chat (`_debug_render_only`) and `logprobs`.
RENDER_SINCE = (0, 11, 5)
LOGPROBS_SINCE = (0, 12, 11)


class ServerError(Exception):
    """A server that failed, refused or could not be reached; `status` is the HTTP status if any."""

    def __init__(self, message: str, status: int | None = None, host: str = ""):
        super().__init__(message)
        self.message, self.status, self.host = message, status, host


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


@dataclass
class Step:
    """The answer to a one-token request: the token, or None where the model ended the text."""

    token: Token | None
    done_reason: str
    prompt_tokens: int


def parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _message(error: ollama.ResponseError) -> str:
    text = error.error
    try:  # the client hands over the raw body for non-2xx answers
        import json

        return json.loads(text).get("error", text)
    except ValueError:
        return text


class OllamaServer:
    """One Ollama (or embedded) server. Methods map onto the HTTP endpoints the engine uses."""

    def __init__(self, host: str, *, connect_timeout: float = 5.0, timeout: float = 300.0):
        self.host, self.connect_timeout, self.timeout = host, connect_timeout, timeout
        self.client = ollama.AsyncClient(host=host, timeout=httpx.Timeout(timeout, connect=connect_timeout))
        self.url = str(self.client._client.base_url).rstrip("/")

    async def aclose(self) -> None:
        await self.client._client.aclose()

    def _error(self, error: Exception) -> ServerError:
        if isinstance(error, ServerError):
            return error
        if isinstance(error, ollama.ResponseError):
            return ServerError(_message(error), error.status_code if error.status_code > 0 else None, self.host)
        if isinstance(error, httpx.TimeoutException):
            limit = self.connect_timeout if isinstance(error, httpx.ConnectTimeout) else self.timeout
            return ServerError(f"the Ollama server at {self.url} did not answer within {limit:g} s "
                               f"({type(error).__name__})", None, self.host)
        if isinstance(error, (ConnectionError, httpx.TransportError)):
            return ServerError(f"cannot reach the Ollama server at {self.url}: {str(error) or type(error).__name__}",
                               None, self.host)
        return ServerError(f"{type(error).__name__}: {error}", None, self.host)

    async def version(self) -> tuple[int, ...]:
        try:
            response = await self.client._client.get("/api/version")
            response.raise_for_status()
            return parse_version(response.json()["version"])
        except Exception as error:  # noqa: BLE001 - one exception type out
            raise self._error(error) from None

    async def is_embedded(self) -> bool:
        try:
            response = await self.client._client.get("/api/version")
            return bool(response.json().get("embedded"))
        except Exception as error:  # noqa: BLE001
            raise self._error(error) from None

    async def models(self) -> list[str]:
        try:
            return [m.model for m in (await self.client.list()).models if m.model]
        except Exception as error:  # noqa: BLE001
            raise self._error(error) from None

    async def show(self, model: str, verbose: bool = False) -> dict[str, Any]:
        try:
            response = await self.client._client.post("/api/show", json={"model": model, "verbose": verbose})
            if response.status_code >= 400:
                raise ollama.ResponseError(response.text, response.status_code)
            return response.json()
        except Exception as error:  # noqa: BLE001
            raise self._error(error) from None

    async def render_chat(self, model: str, messages: list[dict[str, str]], num_ctx: int) -> str:
        """The raw prompt the model's chat template makes of `messages` (Ollama 0.11.5 and newer)."""
        version = await self.version()
        if version < RENDER_SINCE:
            raise ServerError(
                f"this Ollama ({'.'.join(map(str, version))}) cannot render chat templates; "
                "speculative chat needs Ollama 0.11.5 or newer",
                host=self.host,
            )
        body = {"model": model, "messages": messages, "stream": False, "_debug_render_only": True,
                "options": {"num_ctx": num_ctx}}
        try:
            response = await self.client._client.post("/api/chat", json=body)
            if response.status_code >= 400:
                raise ollama.ResponseError(response.text, response.status_code)
            return response.json()["_debug_info"]["rendered_template"]
        except Exception as error:  # noqa: BLE001
            raise self._error(error) from None

    async def stream_raw(
        self, model: str, prompt: str, options: dict[str, Any], top_logprobs: int = 0
    ) -> AsyncIterator[Chunk]:
        """Raw streaming generation, chunk by chunk as the server sends them.

        Leaving the loop early closes the HTTP stream, which stops generation on the server.
        """
        try:
            stream = await self.client.generate(
                model=model, prompt=prompt, raw=True, stream=True, options=options,
                logprobs=True, top_logprobs=top_logprobs,
            )
            async with aclosing(stream):
                async for part in stream:
                    tokens = [
                        Token(entry.token, entry.logprob, {alt.token: alt.logprob for alt in entry.top_logprobs or []})
                        for entry in part.logprobs or []
                    ]
                    yield Chunk(part.response or "", tokens, part.done_reason if part.done else None,
                                part.prompt_eval_count or 0)
        except Exception as error:  # noqa: BLE001
            raise self._error(error) from None

    async def next_token(self, model: str, prompt: str, options: dict[str, Any], top_logprobs: int = 0) -> Step:
        """The model's next token after `prompt` (raw, `num_predict` 1): one validator position."""
        token = None
        async for chunk in self.stream_raw(model, prompt, {**options, "num_predict": 1}, top_logprobs):
            token = chunk.tokens[0] if chunk.tokens else token
            if chunk.done_reason is not None:
                return Step(token, chunk.done_reason, chunk.prompt_tokens)
        raise ServerError("the server ended the answer without a final message", host=self.host)
