"""One generation request on a model's worker: NDJSON chunks as tokens come, or one JSON answer.

The hot path of the validator (K+1 one-token requests per round) and of drafting, so it is lean:
a non-streamed answer is collected on the worker thread and wakes the event loop once, when it is
done; streamed tokens already waiting are written together; every response is encoded once, to
bytes, with no pydantic or `jsonable_encoder` on the way out.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from utils import burst
from utils.api.http import (
    ACCEPTED,
    TRUNCATED,
    ApiError,
    LastLine,
    client_gone,
    json_response,
    ndjson_line,
    ndjson_response,
    now,
)
from utils.api.schemas import Common
from utils.embedded.http.text import TextAssembler
from utils.embedded.http.tools import tool_call_tag
from utils.embedded.runtime.grammar import constraint_for
from utils.embedded.runtime.jobs import ARRIVALS, Completion, Job, RunnerError, TokenInfo
from utils.embedded.runtime.runner import ModelRunner
from utils.thinking import ThinkingParser
from utils.tool_calls import ToolCallStream

_ARRIVAL = "embedded.arrival"
GENERATION_PATHS = ("/api/generate", "/api/chat")


class CountArrivals:
    """ASGI middleware: a generation request counts as arriving (jobs.ARRIVALS) from its first byte
    until its job is submitted or it ends, so a worker holding part of a validator burst knows that
    more of it is still being read."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in GENERATION_PATHS:
            return await self.app(scope, receive, send)
        ARRIVALS.arrive()
        scope[_ARRIVAL] = pending = [True]  # shared by the copies of the scope that middleware makes
        try:
            await self.app(scope, receive, send)
        finally:
            _settle(pending)


def _settle(pending: list[bool] | None) -> None:
    if pending and pending[0]:
        pending[0] = False
        ARRIVALS.settle()


def _submit(request: Request, runner: ModelRunner, job: Job) -> None:
    runner.submit(job)
    _settle(request.scope.get(_ARRIVAL))
    if (accepted := request.scope.get(ACCEPTED)) is not None:  # a stream may begin (shaped_routes.py pings)
        accepted.set()


def final_fields(model: str, reason: str, done: Completion | None, load: float, *, chat: bool) -> dict[str, Any]:
    """The last message of an answer, with Ollama's counters (nanoseconds)."""
    final: dict[str, Any] = {"model": model, "created_at": now()}
    empty: dict[str, Any] = {"message": {"role": "assistant", "content": ""}} if chat else {"response": ""}
    final.update(empty)
    final.update({"done": True, "done_reason": reason})
    if done is not None:
        final.update(
            total_duration=int(load * 1e9) + done.prompt_eval_duration + done.eval_duration,
            load_duration=int(load * 1e9),
            prompt_eval_count=done.prompt_eval_count,
            prompt_eval_duration=done.prompt_eval_duration,
            eval_count=done.eval_count,
            eval_duration=done.eval_duration,
        )
    return final


def final_response(model: str, reason: str, done: Completion | None, load: float, *, chat: bool,
                   stream: bool) -> Response:
    final = final_fields(model, reason, done, load, chat=chat)
    if stream:
        return ndjson_response(_once(ndjson_line(final)))
    return json_response(final)


async def _once(line: bytes) -> AsyncIterator[bytes]:
    yield line


def _logprob(token: bytes, logprob: float) -> dict[str, Any]:
    return {"token": token.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(token)}


def logprob_entry(info: TokenInfo) -> dict[str, Any]:
    entry = _logprob(info.piece, info.logprob or 0.0)
    entry["top_logprobs"] = [_logprob(piece, lp) for _, piece, lp in info.top or []]
    return entry


async def _cancel_on_disconnect(request: Request, job: Job) -> None:
    """A client that gives up on an answer not yet streaming stops its generation, as in Ollama."""
    await client_gone(request)
    job.cancelled.set()


def job_for(body: Common, prompt: str) -> Job:
    opts = body.options
    return Job(
        prompt=prompt.encode("utf-8", errors="surrogatepass"),
        options=opts.sampling(),
        num_predict=opts.num_predict if opts.num_predict >= 0 else 1 << 30,
        top_logprobs=body.top_logprobs if body.logprobs else None,
        on_token=_unset,
        on_done=_unset,
        truncate=body.truncate is not False,  # a prompt past the context is cut, unless refused
    )


def _unset(_: object) -> None:
    raise AssertionError("the job's callbacks were not set")


class Shape:
    """What an answer's text becomes beyond plain content: its thinking split out (thinking.py), tool
    calls parsed out of it as Ollama's chat handler does (utils/tool_calls.py ToolCallStream, with
    the model's tag), and the report of what was left out of the prompt to fit the context."""

    def __init__(self, tools: list[dict[str, Any]] | None, dropped_messages: int,
                 thinking: ThinkingParser | None = None, tag: str = "{"):
        self.tools = ToolCallStream(tag, tools) if tools else None
        self.dropped_messages = dropped_messages
        self.thinking = thinking

    def fields(self, text: str, chat: bool, final: bool = False) -> dict[str, Any]:
        """The answer's fields for the next `text`: `message` (chat) or `response` (generate), each
        with the `thinking` that `text` completes, if any. `final`: for the `done: true` message."""
        thought, text = self.thinking.add(text) if self.thinking else ("", text)
        if not chat:
            return {"response": text, "thinking": thought} if thought else {"response": text}
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if thought:
            message["thinking"] = thought
        if self.tools is not None:  # tool calls are looked for in the content, as Ollama does
            content, calls = self.tools.finish(text) if final else self.tools.step(text) or ("", [])
            message["content"] = content
            if calls:
                message["tool_calls"] = calls
        return {"message": message}

    def whole(self, pieces: list[str]) -> dict[str, Any]:
        """A non-streamed chat's message: the messages streamed for each piece (one per token) and the
        `done` one, joined, as Ollama's writeChatResponse joins them (tool calls are parsed piece by
        piece there too, which is not always what parsing the whole text at once would give)."""
        parts = [self.fields(piece, True)["message"] for piece in pieces]
        parts.append(self.fields("", True, final=True)["message"])
        message: dict[str, Any] = {"role": "assistant", "content": "".join(part["content"] for part in parts)}
        if thought := "".join(part.get("thinking", "") for part in parts):
            message["thinking"] = thought
        if calls := [call for part in parts for call in part.get("tool_calls", [])]:
            message["tool_calls"] = calls
        return {"message": message}

    def holds_all(self, fields: dict[str, Any]) -> bool:
        """A chat chunk with neither thinking, content nor calls while thinking is split or tool calls
        are parsed: Ollama sends none (routes.go ChatHandler)."""
        message = fields.get("message")
        return (self.thinking is not None or self.tools is not None) and message is not None and not (
            message["content"] or message.get("thinking") or message.get("tool_calls"))

    def report(self, job: Job, final: dict[str, Any]) -> None:
        if self.dropped_messages or job.truncated_tokens:
            final["truncated"] = {"messages": self.dropped_messages, "tokens": job.truncated_tokens}

    def mark(self, job: Job, response: Response) -> Response:
        """The cut, as far as it is known when the response starts (the worker cuts a prompt before
        reading it), in a header every endpoint passes on (utils/api/http.py TRUNCATED)."""
        if self.dropped_messages or job.truncated_tokens:
            response.headers[TRUNCATED] = f"messages={self.dropped_messages}, tokens={job.truncated_tokens}"
        return response


async def answer(request: Request, runner: ModelRunner, body: Common, prompt: str, load: float, *,
                 chat: bool, tools: list[dict[str, Any]] | None = None, dropped_messages: int = 0,
                 thinking: ThinkingParser | None = None) -> Response:
    """Run one job; stream NDJSON chunks, or collect them into one response. `thinking`: the parser
    that splits the thinking out of the text (thinking.py), when the request thinks."""
    job = job_for(body, prompt)
    job.burst = burst.parse(request.headers.get(burst.HEADER))
    job.constraint = constraint_for(runner, body.format)  # freed by the worker once the job has run
    assembler = TextAssembler(body.options.stops())
    shape = Shape(tools if chat else None, dropped_messages, thinking, tool_call_tag(runner) if tools else "{")
    if body.stream:
        return await _streamed(request, runner, body, job, assembler, load, chat, shape)
    return await _whole(request, runner, body, job, assembler, load, chat, shape)


async def _whole(request: Request, runner: ModelRunner, body: Common, job: Job, assembler: TextAssembler,
                 load: float, chat: bool, shape: Shape) -> Response:
    return shape.mark(job, json_response(await collect(request, runner, body, job, assembler, load, chat, shape)))


async def collect(request: Request, runner: ModelRunner, body: Common, job: Job, assembler: TextAssembler,
                  load: float, chat: bool, shape: Shape | None = None) -> dict[str, Any]:
    """Run `job` to its end; the non-streamed answer's JSON body."""
    shape = shape or Shape(None, 0)
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[Completion | RunnerError] = loop.create_future()
    parts: list[str] = []
    logprobs: list[dict[str, Any]] = []

    def on_token(info: TokenInfo) -> None:  # the worker thread; read only once the job is done
        parts.append(assembler.feed(info.piece))
        if body.logprobs:
            logprobs.append(logprob_entry(info))
        if assembler.stopped:
            job.cancelled.set()

    def resolve(event: Completion | RunnerError) -> None:
        if not finished.done():
            finished.set_result(event)

    def on_done(event: Completion | RunnerError) -> None:  # the worker thread
        loop.call_soon_threadsafe(resolve, event)

    job.on_token, job.on_done = on_token, on_done
    _submit(request, runner, job)
    watcher = asyncio.create_task(_cancel_on_disconnect(request, job))
    try:
        event = await finished
    finally:
        watcher.cancel()
        job.cancelled.set()  # a client that went away stops the generation
    if isinstance(event, RunnerError):
        raise ApiError(str(event), event.status)
    parts.append(assembler.flush())
    reason = "stop" if assembler.stopped else event.done_reason
    final = final_fields(body.model, reason, event, load, chat=chat)
    if chat and shape.tools is not None:
        final.update(shape.whole(parts))
    else:
        final.update(shape.fields("".join(parts), chat, final=True))
    shape.report(job, final)
    if body.logprobs:
        final["logprobs"] = logprobs
    return final


async def _streamed(request: Request, runner: ModelRunner, body: Common, job: Job, assembler: TextAssembler,
                    load: float, chat: bool, shape: Shape) -> Response:
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[TokenInfo | Completion | RunnerError] = asyncio.Queue()

    def put(event: TokenInfo | Completion | RunnerError) -> None:  # the worker thread
        loop.call_soon_threadsafe(events.put_nowait, event)

    job.on_token = job.on_done = put

    def chunk(text: str, info: TokenInfo | None) -> bytes:
        out: dict[str, Any] = {"model": body.model, "created_at": now()}
        out.update(fields := shape.fields(text, chat))
        if shape.holds_all(fields) and not body.logprobs:
            return b""  # held back by the thinking or tool call parser: Ollama sends nothing
        out["done"] = False
        if body.logprobs:
            out["logprobs"] = [logprob_entry(info)] if info is not None else []
        return ndjson_line(out)

    async def lines() -> AsyncGenerator[bytes, None]:
        """NDJSON lines; the tokens already waiting go out in one write."""
        _submit(request, runner, job)
        try:
            while True:
                waiting = [await events.get()]
                while not events.empty():
                    waiting.append(events.get_nowait())
                out: list[bytes] = []
                for event in waiting:
                    if isinstance(event, RunnerError):
                        if out:
                            yield b"".join(out)
                        raise ApiError(str(event), event.status)
                    if isinstance(event, Completion):
                        if tail := assembler.flush():
                            out.append(chunk(tail, None))
                        reason = "stop" if assembler.stopped else event.done_reason
                        final = final_fields(body.model, reason, event, load, chat=chat)
                        if chat and shape.tools is not None:  # what the tool parser still holds, if any
                            final.update(shape.fields("", chat, final=True))
                        shape.report(job, final)
                        out.append(ndjson_line(final))
                        yield LastLine(b"".join(out))
                        return
                    out.append(chunk(assembler.feed(event.piece), event))
                    if assembler.stopped:
                        job.cancelled.set()
                yield b"".join(out)
        finally:
            job.cancelled.set()  # a client that went away stops the generation

    stream = lines()
    # A client that leaves while its prompt is read stops the reading (no write would tell before then).
    watcher = asyncio.create_task(_cancel_on_disconnect(request, job))
    try:  # errors before the first token get a proper status; later ones arrive as a line
        first = await stream.__anext__()
    except StopAsyncIteration:
        first = None
    finally:
        watcher.cancel()

    async def rest() -> AsyncIterator[bytes]:
        try:
            if first is not None:
                yield first
            async for item in stream:
                yield item
        except ApiError as error:
            yield ndjson_line({"error": error.message})
        finally:
            await stream.aclose()

    return shape.mark(job, ndjson_response(rest()))
