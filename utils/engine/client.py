"""What the speculative engine asks of an Ollama server, over keep-alive HTTP/1.1 connections (transport.py).

One method per endpoint over one `_request` (and `_stream` for NDJSON), plain dicts and `json`
instead of a pydantic model per chunk: this is the hot path, called K+1 times per verification and
once per draft. Every failure becomes a `ServerError` carrying the server's own message; its
subclasses say what kind of failure it was, so callers branch on types, not on message text.

Why not httpx (used everywhere else) or aiohttp: a speculative round makes two or more requests (a
draft, a burst) every few tokens, and either library's own Python cost more per request than the
server's; transport.py is the little HTTP/1.1 the engine needs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any

from utils.burst import EVENTS, NO_SPECULATION, announce
from utils.engine.target import (
    AnswerFormat,
    Chunk,
    ContextFull,
    Drain,
    ModelNotFound,
    RequestRefused,
    ServerError,
    ServerTimeout,
    ServerUnreachable,
    Step,
    Token,
    _context_full,
    nothing_held,
    parse_version,
    refusal,
)
from utils.engine.transport import ConnectTimeout, Transport

# The types and errors of every target (target.py), named here too: callers import them from either.
__all__ = ["Chunk", "ContextFull", "LOGPROBS_SINCE", "ModelNotFound", "OllamaClient", "RENDER_SINCE",
           "RequestRefused", "ServerError", "ServerTimeout", "ServerUnreachable", "Step", "Token",
           "_context_full", "parse_version"]

# Since these Ollama releases: raw prompts of a chat (`_debug_render_only`) and `logprobs`.
RENDER_SINCE = (0, 11, 5)
LOGPROBS_SINCE = (0, 12, 11)


def _with_scheme(host: str) -> str:
    return (host if "://" in host else f"http://{host}").rstrip("/")


def _tokens(body: dict[str, Any]) -> list[Token]:
    return [
        Token(entry["token"], entry.get("logprob"),
              {alt["token"]: alt["logprob"] for alt in entry.get("top_logprobs") or []})
        for entry in body.get("logprobs") or []
    ]


def _seconds(message: dict[str, Any], name: str) -> float | None:
    """One of Ollama's `*_duration` fields (nanoseconds) in seconds; None where the server sent none."""
    value = message.get(name)
    return None if value is None else value / 1e9


def _step(message: dict[str, Any]) -> Step:
    """A one-token answer: its token, why it ended, the prompt's token count, the server's timing."""
    tokens = _tokens(message)
    return Step(tokens[0] if tokens else None, message.get("done_reason") or "stop",
                message.get("prompt_eval_count") or 0, _seconds(message, "total_duration"),
                _seconds(message, "prompt_eval_duration"))


class OllamaClient:
    """A client of one Ollama (or embedded) server. Methods map onto the HTTP endpoints the engine uses."""

    drains = False  # a stream ends only by closing it (target.Drain)
    constrains = False  # a `format` grammar starts where the prompt ends, never mid-answer (target.AnswerFormat)

    def __init__(self, host: str, *, connect_timeout: float = 5.0, timeout: float = 300.0):
        self.host, self.connect_timeout, self.timeout = host, connect_timeout, timeout
        self.url = _with_scheme(host)
        self.http = Transport(self.url, connect_timeout, timeout)  # keep-alive connections (transport.py)
        self._about: dict[str, Any] | None = None
        self.described: dict[tuple[str, str], Any] = {}  # (model, digest) -> ModelInfo (model_info.py)

    async def aclose(self) -> None:
        self.http.close()

    def hold(self, model: str, options: dict[str, Any]) -> AbstractAsyncContextManager[float]:
        return nothing_held(model, options)  # its models stay loaded as its own scheduler decides

    # -- transport -----------------------------------------------------------------------------------

    def _error(self, error: BaseException) -> ServerError:
        if isinstance(error, ServerError):
            return error
        if isinstance(error, TimeoutError):
            limit = self.connect_timeout if isinstance(error, ConnectTimeout) else self.timeout
            return ServerTimeout(f"the Ollama server at {self.url} did not answer within {limit:g} s "
                                 f"({type(error).__name__})", None, self.host)
        if isinstance(error, OSError):  # ConnectionError, and refusals to connect (no such host, ...)
            return ServerUnreachable(f"cannot reach the Ollama server at {self.url}: "
                                     f"{str(error) or type(error).__name__}", None, self.host)
        return ServerError(f"{type(error).__name__}: {error}", None, self.host)

    def _refusal(self, status: int, text: str) -> ServerError:
        try:
            message = json.loads(text).get("error", text)
        except (ValueError, AttributeError):
            message = text
        return refusal(status, str(message), self.host)

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None,
                       headers: dict[str, str] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        try:
            response = await self.http.open(method, path, data, {**NO_SPECULATION, **(headers or {})})
            status, content = response.status, await response.read()
        except Exception as error:  # noqa: BLE001 - one exception type out
            raise self._error(error) from None
        if status >= 400:
            raise self._refusal(status, content.decode(errors="replace"))
        try:
            return json.loads(content)
        except ValueError:
            raise ServerError(f"{self.url}{path} answered with something that is not JSON", status,
                              self.host) from None

    async def _stream(self, path: str, body: dict[str, Any],
                      headers: dict[str, str] = NO_SPECULATION) -> AsyncIterator[dict[str, Any]]:
        """The NDJSON messages of a streamed answer. Leaving early closes the connection, which stops
        generation on the server."""
        response = None
        try:
            response = await self.http.open("POST", path, json.dumps(body).encode(), headers)
            if response.status >= 400:
                raise self._refusal(response.status, (await response.read()).decode(errors="replace"))
            pending = b""
            async for data in response.pieces():
                *lines, pending = (pending + data).split(b"\n")
                for line in lines:
                    if message := self._message(line, response.status):
                        yield message
            if message := self._message(pending, response.status):  # a last line without its newline
                yield message
        except ServerError:
            raise
        except Exception as error:  # noqa: BLE001
            raise self._error(error) from None
        finally:
            if response is not None:
                # Read to the end, the connection is already back in the pool and this does nothing.
                # Otherwise (the caller stopped early, or an error) it drops the connection, which the
                # server takes as the client leaving, and stops generating.
                response.close()

    def _message(self, line: bytes, status: int) -> dict[str, Any] | None:
        """One NDJSON line of a stream, None if blank; an `{"error": ...}` line is raised (as the status
        it carries, where it carries one: event_stream.py's do)."""
        if not line.strip():
            return None
        message = json.loads(line)
        if "error" in message:
            if isinstance(message.get("status"), int):
                raise refusal(message["status"], str(message["error"]), self.host)
            raise ServerError(str(message["error"]), status, self.host)
        return message

    # -- endpoints -----------------------------------------------------------------------------------

    async def about(self) -> dict[str, Any]:
        """`/api/version`, read once per server object (the embedded server adds its own fields)."""
        if self._about is None:
            self._about = await self._request("GET", "/api/version")
        return self._about

    async def version(self) -> tuple[int, ...]:
        return parse_version(str((await self.about()).get("version", "")))

    async def is_embedded(self) -> bool:
        return bool((await self.about()).get("embedded"))

    async def list_models(self) -> list[dict[str, Any]]:
        """`/api/tags`: every model with its size and details, as `ollama list` shows them."""
        return list((await self._request("GET", "/api/tags")).get("models") or [])

    async def models(self) -> list[str]:
        return [m["model"] for m in await self.list_models() if m.get("model")]

    async def show(self, model: str, verbose: bool = False) -> dict[str, Any]:
        return await self._request("POST", "/api/show", {"model": model, "verbose": verbose})

    async def running(self) -> list[dict[str, Any]]:
        """`/api/ps`: the loaded models, each with the context it is loaded with (`context_length`)."""
        return list((await self._request("GET", "/api/ps")).get("models") or [])

    async def exact_logprobs(self) -> bool:
        """Whether the server declares its top log-probabilities to be exactly the distribution its
        sampler draws from (the embedded server does). llama.cpp's sampler (Ollama 0.30+) applies
        temperature after top-p/min-p and penalties to what logprobs do not show, so rejection
        sampling, which rebuilds the distribution from them, is exact only where declared."""
        return bool((await self.about()).get("exact_logprobs"))

    async def stream_answer(self, chat: bool, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """A standard answer as the client would ask for it (`/api/chat` or `/api/generate`, streamed),
        message by message: where only the server can shape the answer (a thinking model splitting
        `thinking` from the content), it does so exactly as for a direct request."""
        async for message in self._stream("/api/chat" if chat else "/api/generate", {**body, "stream": True}):
            yield message

    async def answer_events(self, chat: bool, body: dict[str, Any],
                            headers: dict[str, str]) -> AsyncIterator[dict[str, Any]]:
        """An answer made by the engine in a speculating server (`cli.py serve`), event by event: the
        `speculative_event` objects it streams when asked with `headers` (utils/proxy/event_stream.py)."""
        path = "/api/chat" if chat else "/api/generate"
        async for message in self._stream(path, {**body, "stream": True}, {**headers, EVENTS: "on"}):
            if "speculative_event" not in message:
                raise ServerError(f"{self.url}{path} did not stream the engine's events (X-Speculation-Events)",
                                  None, self.host)
            yield message["speculative_event"]

    async def render_chat(self, model: str, messages: list[dict[str, Any]], options: dict[str, Any],
                          think: bool | str | None = None, tools: list[dict[str, Any]] | None = None) -> str:
        """The raw prompt the model's chat template makes of `messages` and `tools` (Ollama 0.11.5 and
        newer), with the client's own `options` (a num_ctx changes which history fits) and `think` (a
        thinking template renders differently with thinking off); None leaves `think` out, as the
        client did."""
        version = await self.version()
        if version < RENDER_SINCE:
            raise RequestRefused(
                f"this Ollama ({'.'.join(map(str, version))}) cannot render chat templates; "
                "speculative chat needs Ollama 0.11.5 or newer",
                host=self.host,
            )
        body = {"model": model, "messages": messages, "stream": False, "_debug_render_only": True,
                "options": options, **({"think": think} if think is not None else {}),
                **({"tools": tools} if tools else {})}
        return (await self._request("POST", "/api/chat", body))["_debug_info"]["rendered_template"]

    def _generate_body(self, model: str, prompt: str, options: dict[str, Any], top_logprobs: int,
                       stream: bool, format: Any = None) -> dict[str, Any]:
        # truncate: false, because a context cut to fit would be verified against another text than
        # the answer's: a prompt past num_ctx is the server's 400, not a silently shortened context.
        # think: false, because Ollama (0.12.4+) runs a thinking model's parser on raw output too and
        # would move text into `thinking` (a model without thinking accepts false as well).
        return {"model": model, "prompt": prompt, "raw": True, "stream": stream, "options": options,
                "logprobs": True, "top_logprobs": top_logprobs, "truncate": False, "think": False,
                **({"format": format} if format is not None else {})}

    async def stream_raw(
        self, model: str, prompt: str, options: dict[str, Any], top_logprobs: int = 0,
        format: AnswerFormat | None = None, drain: Drain | None = None,
    ) -> AsyncIterator[Chunk]:
        """Raw streaming generation, chunk by chunk as the server sends them.

        Leaving the loop early closes the HTTP stream, which stops generation on the server; `drain`
        cannot be honoured over HTTP (`drains` is False): the engine closes the stream instead.
        """
        if format is not None and format.start != len(prompt):
            raise ValueError("over HTTP a format's grammar starts where the prompt ends (Target.constrains)")
        body = self._generate_body(model, prompt, options, top_logprobs, stream=True,
                                   format=None if format is None else format.format)
        async for message in self._stream("/api/generate", body):
            done = message.get("done")
            yield Chunk(message.get("response") or "", _tokens(message),
                        (message.get("done_reason") or "stop") if done else None,
                        message.get("prompt_eval_count") or 0, _seconds(message, "total_duration"))

    async def next_token(self, model: str, prompt: str, options: dict[str, Any], top_logprobs: int = 0,
                         burst: dict[str, str] | None = None) -> Step:
        """The model's next token after `prompt` (raw, `num_predict` 1): one validator position.
        `burst`: the header that announces the validator burst it belongs to (utils/burst.py).

        Not streamed: one small JSON body instead of two NDJSON messages."""
        body = self._generate_body(model, prompt, {**options, "num_predict": 1}, top_logprobs, stream=False)
        return _step(await self._request("POST", "/api/generate", body, burst))

    async def next_tokens(self, model: str, prompts: list[str], options: list[dict[str, Any]],
                          top_logprobs: int = 0, format: AnswerFormat | None = None) -> list[Step]:
        """`next_token` for each prompt, all at once: one validator burst.

        A server that says it has the burst endpoint (the embedded one, utils/embedded/http/burst_api.py)
        gets them in one HTTP request; any other Ollama gets one request each, concurrently, each
        announcing the burst (utils/burst.py). No `format`: over HTTP a grammar cannot resume mid-answer."""
        if format is not None:
            raise ValueError("over HTTP a format's grammar cannot resume mid-answer (Target.constrains)")
        if len(prompts) > 1 and (await self.about()).get("burst_endpoint"):
            bodies = [self._generate_body(model, prompt, {**each, "num_predict": 1}, top_logprobs, stream=False)
                      for prompt, each in zip(prompts, options)]
            answers = (await self._request("POST", "/speculative/burst", {"requests": bodies}))["responses"]
            return [_step(message) for message in answers]
        burst = announce(len(prompts))
        return list(await asyncio.gather(*(
            self.next_token(model, prompt, each, top_logprobs, burst) for prompt, each in zip(prompts, options)
        )))
