"""The embedded server as the engine's target, in its own process: `InProcessTarget`.

It implements the engine's `Target` (utils/engine/target.py) for `cli.py serve`, which speculates
inside the server. A speculative round's requests (a validator burst, a draft, a standard segment:
raw generation) become runner jobs directly, with no HTTP, no JSON and no request model: a burst is
K+1 jobs announced as one (so one evaluation), and the event loop is woken once, when the last of
them is done. What the engine asks once an answer or once a model (the model list, `show`, a chat's
rendered prompt, a standard answer) goes to the server's own routes in process, through ASGI, so
that it is answered by the very code that answers clients. Each answer carries the runner's own
timing (`Step.engine_s`, `Chunk.engine_s`), as Ollama's durations do over HTTP.

`in_process_target` builds the server in a process that runs no HTTP listener (a benchmark, a test).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from utils.api.http import ApiError
from utils.api.schemas import Options
from utils.burst import new_id
from utils.embedded.http.api import about, create_app
from utils.embedded.http.text import TextAssembler
from utils.embedded.runtime.grammar import GrammarConstraint, GrammarCursor
from utils.embedded.runtime.jobs import Completion, Job, RunnerError, TokenInfo
from utils.embedded.runtime.loaded import LoadedModels
from utils.embedded.runtime.runner import ModelRunner
from utils.embedded.store.models import ModelStore
from utils.engine.target import AnswerFormat, Chunk, Drain, ServerError, Step, Token, parse_version, refusal
from utils.sampling import SamplingOptions

URL = "in-process://embedded"  # names this server in the engine's caches
MAX_CURSORS = 16  # grammars of answers in progress kept at once (an answer past them starts its own again)


def _unset(_: object) -> None:
    raise AssertionError("the job's callbacks were not set")


def _token(info: TokenInfo) -> Token:
    """As the HTTP path's logprobs read (answer.logprob_entry): bytes decoded, a partial character as U+FFFD."""
    return Token(info.piece.decode("utf-8", errors="replace"), info.logprob,
                 {piece.decode("utf-8", errors="replace"): logprob for _, piece, logprob in info.top or []})


def _engine_s(end: Completion) -> float:
    """A job's time in the engine, as Ollama's total_duration counts it for a loaded model: its prompt's
    evaluation and its generation (nanoseconds on the runner's clock, here in seconds)."""
    return (end.prompt_eval_duration + end.eval_duration) / 1e9


def _error(error: BaseException) -> ServerError:
    """A failure as the HTTP path would report it: the server's status and message."""
    if isinstance(error, ServerError):
        return error
    if isinstance(error, (ApiError, RunnerError)):
        return refusal(error.status or 500, error.message, URL)
    return ServerError(f"{type(error).__name__}: {error}", 500, URL)


class InProcessTarget:
    """The engine's target for the embedded server it runs in. `app` is the server's ASGI stack below
    the speculating front (what a forwarded request gets); `models` its loaded models; `about` what
    its `/api/version` says."""

    url = URL
    drains = True  # stream_raw ends after the token in flight when asked (engine.target.Drain)
    constrains = True  # a `format` grammar resumes mid-answer (GrammarCursor)

    def __init__(self, app: Callable[..., Any], models: LoadedModels, about: dict[str, Any]):
        self.app, self.loaded, self._about = app, models, about
        self.described: dict[tuple[str, str], Any] = {}
        self._options: dict[object, Options] = {}  # the engine sends few distinct option sets: parsed once
        self._samplings: dict[int, tuple[Options, dict[str, object], SamplingOptions]] = {}
        self._cursors: dict[tuple[str, str, str], GrammarCursor] = {}  # the answers' grammars (`_constraints`)

    async def aclose(self) -> None:
        return None

    # -- once per server or model: the server's own routes, in process ----------------------------

    async def about(self) -> dict[str, Any]:
        return self._about

    async def version(self) -> tuple[int, ...]:
        return parse_version(str(self._about["version"]))

    async def is_embedded(self) -> bool:
        return True

    async def exact_logprobs(self) -> bool:
        return bool(self._about.get("exact_logprobs"))

    async def list_models(self) -> list[dict[str, Any]]:
        return list((await self._call("GET", "/api/tags")).get("models") or [])

    async def models(self) -> list[str]:
        return [entry["model"] for entry in await self.list_models()]

    async def show(self, model: str, verbose: bool = False) -> dict[str, Any]:
        return await self._call("POST", "/api/show", {"model": model, "verbose": verbose})

    async def running(self) -> list[dict[str, Any]]:
        return list((await self._call("GET", "/api/ps")).get("models") or [])

    async def render_chat(self, model: str, messages: list[dict[str, Any]], options: dict[str, Any],
                          think: bool | str | None = None, tools: list[dict[str, Any]] | None = None) -> str:
        body = {"model": model, "messages": messages, "stream": False, "_debug_render_only": True,
                "options": options, **({"think": think} if think is not None else {}),
                **({"tools": tools} if tools else {})}
        return (await self._call("POST", "/api/chat", body))["_debug_info"]["rendered_template"]

    async def stream_answer(self, chat: bool, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        pending = b""
        async for status, data in _asgi(self.app, "POST", "/api/chat" if chat else "/api/generate",
                                        {**body, "stream": True}):
            if status >= 400:
                raise refusal(status, _message(data), URL)
            *lines, pending = (pending + data).split(b"\n")
            for line in filter(bytes.strip, lines):
                message = json.loads(line)
                if "error" in message:
                    raise ServerError(str(message["error"]), status, URL)
                yield message

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        pieces = [piece async for piece in _asgi(self.app, method, path, body)]
        status, data = (pieces[-1][0] if pieces else 500), b"".join(data for _, data in pieces)
        if status >= 400:
            raise refusal(status, _message(data), URL)
        return json.loads(data)

    # -- every round: runner jobs ------------------------------------------------------------------

    def _parsed(self, options: dict[str, Any], num_predict: int | None = None) -> Options:
        """`options`, with `num_predict` in place of its own if given, parsed once per distinct set.
        The key keeps each value's type, so that 1, 1.0 and True are not one set."""
        try:
            key: object = (num_predict, tuple((name, value.__class__, value) for name, value in options.items()))
            parsed = self._options.get(key)
        except TypeError:  # an unhashable value (a list of stops): by its text
            key = (num_predict, repr(sorted(options.items())))
            parsed = self._options.get(key)
        if parsed is None:
            if len(self._options) >= 1024:  # sampled verifications send a seed per position
                self._options.clear()
                self._samplings.clear()
            parsed = self._options[key] = Options.model_validate(
                options if num_predict is None else {**options, "num_predict": num_predict})
        return parsed

    def _sampling(self, runner: ModelRunner, options: Options) -> SamplingOptions:
        """How a job samples with `options` under the runner's Modelfile parameters: worked out once
        per option set and model (the entry holds both, so neither's id can be reused meanwhile)."""
        found = self._samplings.get(id(options))
        if found is None or found[0] is not options or found[1] is not runner.parameters:
            found = self._samplings[id(options)] = (options, runner.parameters,
                                                     options.under(runner.parameters).sampling())
        return found[2]

    @asynccontextmanager
    async def hold(self, model: str, options: dict[str, Any]) -> AsyncIterator[float]:
        """The model loaded as the answer's options load it, kept so until the answer ends: another
        client's num_ctx or unload waits for it (LoadedModels.hold). A model that cannot be loaded is
        not held: the answer's first request reports why, as it would over HTTP."""
        try:
            held = self.loaded.hold(model, self._parsed(options).num_ctx)
            load = await held.__aenter__()
        except Exception:  # noqa: BLE001 - reported by the answer's own requests
            yield 0.0
            return
        try:
            yield load
        finally:
            await held.__aexit__(None, None, None)

    async def _runner(self, model: str, options: Options) -> ModelRunner:
        try:
            runner, _ = await self.loaded.get(model, options.num_ctx)
        except Exception as error:  # noqa: BLE001 - one error type out, as over HTTP
            raise _error(error) from None
        return runner

    def _constraints(self, runner: ModelRunner, model: str, format: AnswerFormat | None,
                     prompts: list[str]) -> list[GrammarConstraint | None]:
        """Each prompt's constraint: the answer's grammar after the first prompt's answer text, then
        after the rest of the prompt (a draft); None without `format`, or past a draft the grammar
        does not allow (whose rows verification never reads: the target's token before it differs)."""
        if format is None:
            return [None] * len(prompts)
        answer = prompts[0]
        key = (model, json.dumps(format.format, sort_keys=True), answer[: format.start])
        cursor = self._cursors.get(key)
        if cursor is None:
            if len(self._cursors) >= MAX_CURSORS:  # answers that ended: the oldest goes
                self._cursors.pop(next(iter(self._cursors))).close()
            try:
                cursor = self._cursors[key] = GrammarCursor(runner, format.format)
            except ApiError as error:
                raise _error(error) from None
        try:
            return [cursor.fork(answer[format.start:], prompt[len(answer):]) for prompt in prompts]
        except ApiError as error:
            raise _error(error) from None

    @staticmethod
    def _job(runner: ModelRunner, prompt: str, sampling: SamplingOptions, num_predict: int, top_logprobs: int,
             constraint: GrammarConstraint | None = None, on_token: Callable[[TokenInfo], None] = _unset,
             on_done: Callable[[Completion | RunnerError], None] = _unset, cancelled: threading.Event | None = None,
             burst: tuple[str, int] | None = None) -> Job:
        # As a raw /api/generate with `truncate: false` (the engine's requests, client.py): a prompt
        # past the context is refused, never cut. Without alternatives asked, no log-probability is
        # computed (a pass over the whole vocabulary per token, which the engine does not read then).
        # A burst's jobs share one cancellation.
        job = Job(prompt.encode("utf-8", errors="surrogatepass"), sampling,
                  num_predict if num_predict >= 0 else 1 << 30, top_logprobs or None, on_token, on_done,
                  cancelled or threading.Event(), burst=burst, truncate=False)
        job.constraint = constraint
        return job

    async def next_token(self, model: str, prompt: str, options: dict[str, Any], top_logprobs: int = 0,
                         burst: dict[str, str] | None = None) -> Step:
        return (await self.next_tokens(model, [prompt], [options], top_logprobs))[0]

    async def next_tokens(self, model: str, prompts: list[str], options: list[dict[str, Any]],
                          top_logprobs: int = 0, format: AnswerFormat | None = None) -> list[Step]:
        """K+1 one-token jobs, announced as one burst: evaluated together, submitted in order. Built
        with as little Python as will do (it runs on caches the last decode left cold): each option set
        is read once, and the jobs share one cancellation."""
        distinct = {id(each): each for each in options}  # a greedy validator sends one dict for every position
        parsed = {key: self._parsed(each, num_predict=1) for key, each in distinct.items()}
        first = parsed[id(options[0])]
        runner = self.loaded.ready(model, first.num_ctx) or await self._runner(model, first)
        sampling = {key: self._sampling(runner, each) for key, each in parsed.items()}
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()
        tokens: list[TokenInfo | None] = [None] * len(prompts)
        ends: list[Completion | RunnerError | None] = [None] * len(prompts)
        left = [len(prompts)]

        def wake() -> None:  # on the loop; the answer may have been left meanwhile (cancelled)
            if not finished.done():
                finished.set_result(None)

        def done(index: int, event: Completion | RunnerError) -> None:  # on the model's one worker thread
            ends[index] = event
            left[0] -= 1
            if left[0] == 0:
                loop.call_soon_threadsafe(wake)

        announced, cancelled = (new_id(), len(prompts)), threading.Event()
        constraints = self._constraints(runner, model, format, prompts)
        jobs = [self._job(runner, prompt, sampling[id(each)], 1, top_logprobs, constraint, cancelled=cancelled,
                          burst=announced, on_token=partial(tokens.__setitem__, index), on_done=partial(done, index))
                for index, (prompt, each, constraint) in enumerate(zip(prompts, options, constraints))]
        runner.submit_all(jobs)
        try:
            await finished
        except BaseException:  # the answer was left (its task cancelled): the jobs not done stop
            cancelled.set()
            raise
        steps = []
        for info, end in zip(tokens, ends):
            if isinstance(end, RunnerError):
                raise _error(end)
            assert end is not None
            steps.append(Step(_token(info) if info is not None else None, end.done_reason, end.prompt_eval_count,
                              _engine_s(end), end.prompt_eval_duration / 1e9))
        return steps

    async def stream_raw(self, model: str, prompt: str, options: dict[str, Any], top_logprobs: int = 0,
                         format: AnswerFormat | None = None, drain: Drain | None = None) -> AsyncIterator[Chunk]:
        """A raw streamed generation: one chunk per token, then the closing one. Leaving early cancels
        the job, as a closed connection does over HTTP. With `drain` requested, the job is cancelled
        and read to its end: the worker, which checks for that after each token it gives, gives the
        token it was computing and stops there. That token is yielded if it completes its characters
        (else dropped, as if never computed), and the stream ends without a closing chunk, unless the
        model itself ended the text."""
        runner = await self._runner(model, parsed := self._parsed(options))
        parsed = parsed.under(runner.parameters)
        job = self._job(runner, prompt, self._sampling(runner, parsed), parsed.num_predict, top_logprobs,
                        self._constraints(runner, model, format, [prompt])[0])
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[TokenInfo | Completion | RunnerError] = asyncio.Queue()

        def give(event: TokenInfo | Completion | RunnerError) -> None:  # on the model's worker thread
            loop.call_soon_threadsafe(events.put_nowait, event)

        job.on_token = job.on_done = give
        assembler = TextAssembler(parsed.stops())
        runner.submit(job)
        try:
            while True:
                draining = drain is not None and drain.requested
                if draining:  # the worker, busy with this answer, sees it after the token it is computing
                    job.cancelled.set()
                event = await events.get()
                if isinstance(event, RunnerError):
                    raise _error(event)
                if isinstance(event, Completion):
                    if draining and event.done_reason != "stop":
                        return  # ended as asked: not an end of the answer
                    reason = "stop" if assembler.stopped else event.done_reason
                    yield Chunk(assembler.flush(), [], reason, event.prompt_eval_count, _engine_s(event))
                    return
                text = assembler.feed(event.piece)
                if draining and assembler.holding:
                    return  # part of a character: dropped, as if the stream had been closed before it
                if assembler.stopped:
                    job.cancelled.set()
                yield Chunk(text, [_token(event)], None, 0)
        finally:
            job.cancelled.set()


@asynccontextmanager
async def in_process_target(store: ModelStore, **app_options: Any) -> AsyncIterator[InProcessTarget]:
    """The embedded server built in this process with no HTTP listener (create_app's `app_options`:
    threads, gpu_layers, ...), as the target that `cli.py serve` speculates on, for what measures or
    tests that path without a server; its models are freed on leaving. Like any use of the runtime,
    it wants llama.cpp's libraries loaded before numpy's (server.load_app, called first)."""
    app = create_app(store, **app_options)
    models = app.state.models
    try:
        yield InProcessTarget(app, models, about(models))
    finally:
        await models.close()


def _message(data: bytes) -> str:
    try:
        return str(json.loads(data).get("error", data.decode(errors="replace")))
    except (ValueError, AttributeError):
        return data.decode(errors="replace")


async def _asgi(app: Callable[..., Any], method: str, path: str,
                body: dict[str, Any] | None) -> AsyncIterator[tuple[int, bytes]]:
    """One request to an ASGI app in this process: (status, body bytes) as the app sends them."""
    content = b"" if body is None else json.dumps(body).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
             "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode())],
             "client": ("127.0.0.1", 0), "server": ("127.0.0.1", 0)}
    sent: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    requested, gone = False, asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": content, "more_body": False}
        await gone.wait()  # asked again only to learn that the client has left
        return {"type": "http.disconnect"}

    async def run() -> None:
        try:
            await app(scope, receive, sent.put)
        finally:
            sent.put_nowait(None)

    task = asyncio.get_running_loop().create_task(run())
    status = 500
    try:
        while (message := await sent.get()) is not None:
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                yield status, message.get("body", b"")
                if not message.get("more_body", False):
                    break
        await task  # an app that failed raises here
    finally:
        gone.set()  # a caller that stopped reading: the app sees the client leave and stops
        if not task.done():
            await asyncio.wait({task}, timeout=5)
