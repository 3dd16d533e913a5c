"""The embedded server's HTTP API: the part of Ollama's API that this project and ordinary clients use.

Shapes, defaults, status codes and error messages follow Ollama (see the README's API notes). The
server knows nothing about speculation; it only makes nested validator requests cheap (engine.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse as _JSONResponse
from fastapi.responses import StreamingResponse
from jinja2.sandbox import ImmutableSandboxedEnvironment
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from utils.embedded.engine import Completion, EngineError, Job, ModelRunner, TokenInfo
from utils.embedded.models import ModelError, ModelStore
from utils.sampling import SamplingOptions
from utils.embedded.text import TextAssembler

OLLAMA_VERSION = "0.12.11"  # the Ollama release whose API this server implements
MAX_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_NUM_CTX = 4096
MIN_TEMPERATURE = 1e-6  # below this, sampling is greedy


class JSONResponse(_JSONResponse):
    """JSON as UTF-8; a lone surrogate from the request (JSON "\\ud800") is written escaped, not a 500."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode()


class BodyLimit:
    """ASGI middleware: request bodies over MAX_BODY_BYTES get 413, whether announced by Content-Length
    or sent chunked (read up to the limit, never further). POST bodies are read as JSON whatever their
    Content-Type, as Ollama does: its documented `curl -d '{...}'` sends a form type."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return await self._too_large(scope, receive, send)
        if scope["method"] == "POST":
            scope = {**scope, "headers": headers + [(b"content-type", b"application/json")]}
        if length is not None or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        body, more = bytearray(), True  # chunked: buffer at most MAX_BODY_BYTES, then hand it on
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > MAX_BODY_BYTES:
                return await self._too_large(scope, receive, send)
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    @staticmethod
    async def _too_large(scope: dict, receive: Any, send: Any) -> None:
        response = JSONResponse({"error": f"request body larger than {MAX_BODY_BYTES} bytes"}, 413)
        await response(scope, receive, send)


class ApiError(Exception):
    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.message, self.status = message, status


# -- request bodies ---------------------------------------------------------------------------------


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

    def sampling(self) -> SamplingOptions:
        seed = None if self.seed is None or self.seed < 0 else self.seed
        # Logits divided by a temperature this small overflow to inf - inf = NaN (a 500); it is greedy.
        temperature = self.temperature if self.temperature >= MIN_TEMPERATURE else 0.0
        return SamplingOptions(temperature, self.top_k, self.top_p, self.min_p, seed)

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str = ""


class Common(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    stream: bool = True
    options: Options = Field(default_factory=Options)
    logprobs: bool = False
    top_logprobs: int = 0
    keep_alive: Any = None
    format: Any = None
    debug_render_only: bool = Field(False, alias="_debug_render_only")


class GenerateBody(Common):
    prompt: str = ""
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: bool = False
    suffix: str | None = None


class ChatBody(Common):
    messages: list[Message] = Field(default_factory=list)


class ShowBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = ""
    name: str = ""  # the older spelling
    verbose: bool = False


# -- models -------------------------------------------------------------------------------------


class Models:
    """Loaded runners by name; a request with another num_ctx reloads the model, as Ollama does."""

    def __init__(self, store: ModelStore, threads: int, batch: bool, fast_batches: bool):
        self.store, self.threads, self.batch, self.fast_batches = store, threads, batch, fast_batches
        self.runners: dict[str, ModelRunner] = {}
        self.lock = asyncio.Lock()

    async def get(self, name: str, num_ctx: int | None = None) -> tuple[ModelRunner, float]:
        try:
            spec = self.store.spec(name)
        except ModelError:
            raise ApiError(f"model '{name}' not found", 404) from None
        if not self.store.path(spec.name).exists():
            raise ApiError(
                f"model '{spec.name}' not found; install it with: python cli.py models install {spec.name}",
                404,
            )
        async with self.lock:
            runner = self.runners.get(spec.name)
            wanted = num_ctx or DEFAULT_NUM_CTX  # as in Ollama: a request without num_ctx gets the default
            if runner and runner.num_ctx == wanted:
                return runner, 0.0
            started = time.perf_counter()
            if runner:
                await asyncio.to_thread(runner.close)
            try:  # a truncated or damaged file is refused before llama.cpp reads it
                await asyncio.to_thread(self.store.verify, spec.name)
            except ModelError as error:
                self.runners.pop(spec.name, None)
                raise ApiError(str(error), 500) from None
            try:
                runner = await asyncio.to_thread(
                    ModelRunner, spec.name, self.store.path(spec.name), wanted, self.threads, self.batch,
                    self.fast_batches,
                )
            except Exception as error:  # noqa: BLE001 - a corrupt file must be a message, not a crash
                self.runners.pop(spec.name, None)
                raise ApiError(f"model '{spec.name}' failed to load: {error}", 500) from None
            self.runners[spec.name] = runner
            return runner, time.perf_counter() - started

    async def close(self) -> None:
        for runner in self.runners.values():
            await asyncio.to_thread(runner.close)
        self.runners.clear()


# -- templates ----------------------------------------------------------------------------------

_jinja = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)


def _raise(message: str) -> None:
    raise ApiError(f"template error: {message}", 400)


_jinja.globals.update(raise_exception=_raise, strftime_now=lambda fmt: datetime.now().strftime(fmt))


def render_chat(runner: ModelRunner, messages: list[dict[str, Any]]) -> str:
    """The exact prompt the model's own chat template makes, ending where the assistant speaks."""
    template = runner.metadata.get("tokenizer.chat_template")
    if not template:  # a base model: plain concatenation, as Ollama's default "{{ .Prompt }}"
        return "".join(m["content"] for m in messages)
    try:
        return _jinja.from_string(template).render(
            messages=messages, add_generation_prompt=True, bos_token="", eos_token=""
        )
    except ApiError:
        raise
    except Exception as error:  # noqa: BLE001 - odd extra fields (tool_calls: "abc") must be a 400, not a 500
        raise ApiError(f"template error: {type(error).__name__}: {error}", 400) from None


# -- the app ------------------------------------------------------------------------------------


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _logprob(token: bytes, logprob: float) -> dict[str, Any]:
    return {"token": token.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(token)}


def _logprobs_of(info: TokenInfo) -> list[dict[str, Any]]:
    entry = _logprob(info.piece, info.logprob or 0.0)
    entry["top_logprobs"] = [_logprob(piece, lp) for _, piece, lp in info.top or []]
    return [entry]


def create_app(store: ModelStore, threads: int = 2, batch: bool = True, fast_batches: bool = False) -> FastAPI:
    app = FastAPI(title="Embedded Ollama-compatible server", version=OLLAMA_VERSION,
                  default_response_class=JSONResponse)
    app.add_middleware(BodyLimit)
    models = Models(store, threads, batch, fast_batches)
    app.state.models = models

    @app.on_event("shutdown")
    async def _close() -> None:
        await models.close()

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, error: ApiError) -> JSONResponse:
        return JSONResponse({"error": error.message}, error.status)

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, error: HTTPException) -> JSONResponse:
        # Unknown paths, wrong methods and bodies that are not JSON (invalid UTF-8): Ollama's shape.
        return JSONResponse({"error": str(error.detail)}, error.status_code, headers=error.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {"msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return JSONResponse({"error": f"invalid request: {where} {first['msg']}".strip()}, 400)

    @app.get("/")
    async def root() -> Any:
        from fastapi.responses import PlainTextResponse

        return PlainTextResponse("Ollama is running")

    @app.get("/api/version")
    async def version() -> dict[str, Any]:
        return {"version": OLLAMA_VERSION, "embedded": True, "batches_nested_requests": models.batch}

    @app.get("/api/tags")
    async def tags() -> dict[str, Any]:
        return {"models": [_model_entry(spec) for spec in store.installed()]}

    @app.get("/api/ps")
    async def ps() -> dict[str, Any]:
        return {
            "models": [
                {**_model_entry(store.spec(name)), "expires_at": "0001-01-01T00:00:00Z",
                 "size_vram": 0, "context_length": runner.num_ctx}
                for name, runner in models.runners.items()
            ]
        }

    @app.post("/api/show")
    async def show(body: ShowBody) -> dict[str, Any]:
        runner, _ = await models.get(body.model or body.name)
        info: dict[str, Any] = {key: _number(value) for key, value in runner.metadata.items()}
        info.pop("tokenizer.chat_template", None)
        info["tokenizer.ggml.tokens"] = runner.vocabulary() if body.verbose else []
        info["general.parameter_count"] = info.get("general.parameter_count", 0)
        entry = _model_entry(store.spec(runner.name))
        return {
            "license": "",
            "modelfile": f"FROM {runner.path}",
            "parameters": "",
            "template": runner.metadata.get("tokenizer.chat_template", "{{ .Prompt }}"),
            "details": entry["details"],
            "model_info": info,
            "capabilities": ["completion"],
            "modified_at": entry["modified_at"],
        }

    @app.post("/api/generate")
    async def generate(body: GenerateBody, request: Request):
        _check_common(body)
        if body.raw and (body.template or body.system or body.context):
            raise ApiError("raw mode does not support template, system, or context", 400)
        runner, load = await models.get(body.model, body.options.num_ctx)
        if body.raw:
            prompt = body.prompt
        else:
            messages = ([{"role": "system", "content": body.system}] if body.system else []) + (
                [{"role": "user", "content": body.prompt}] if body.prompt else []
            )
            prompt = render_chat(runner, messages) if messages else ""
        if body.debug_render_only:
            return {"model": body.model, "created_at": _now(), "_debug_info": {"rendered_template": prompt}}
        if not body.prompt:  # Ollama answers an empty prompt by only loading the model
            return _final_response(body.model, "load", None, load, chat=False, stream=body.stream)
        return await _answer(request, runner, body, prompt, load, chat=False)

    @app.post("/api/chat")
    async def chat(body: ChatBody, request: Request):
        _check_common(body)
        runner, load = await models.get(body.model, body.options.num_ctx)
        messages = [m.model_dump() for m in body.messages]
        prompt = render_chat(runner, messages) if messages else ""
        if body.debug_render_only:
            return {"model": body.model, "created_at": _now(), "_debug_info": {"rendered_template": prompt}}
        if not messages:
            return _final_response(body.model, "load", None, load, chat=True, stream=body.stream)
        return await _answer(request, runner, body, prompt, load, chat=True)

    return app


def _check_common(body: Common) -> None:
    if not 0 <= body.top_logprobs <= 20:
        raise ApiError("top_logprobs must be between 0 and 20", 400)


def _number(value: str) -> Any:
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    if re.fullmatch(r"-?\d+\.\d*(e-?\d+)?", value):
        return float(value)
    return value


def _model_entry(spec) -> dict[str, Any]:
    tag = spec.name.split(":")[-1]
    quant = re.search(r"(Q\d_K_[MS]|Q\d_\d|Q\d_K|F16)", spec.file, re.I)
    return {
        "name": spec.name,
        "model": spec.name,
        "modified_at": "2026-01-01T00:00:00Z",
        "size": spec.size,
        "digest": spec.sha256,
        "details": {
            "parent_model": "",
            "format": "gguf",
            "family": spec.family.rstrip("0123456789.").split("-")[0],
            "families": [spec.family],
            "parameter_size": tag.upper(),
            "quantization_level": quant.group(1).upper() if quant else "unknown",
        },
    }


def _final_response(model: str, reason: str, done: Completion | None, load: float, *, chat: bool, stream: bool):
    final: dict[str, Any] = {"model": model, "created_at": _now()}
    final.update({"message": {"role": "assistant", "content": ""}} if chat else {"response": ""})
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
    if stream:
        return StreamingResponse(iter([json.dumps(final) + "\n"]), media_type="application/x-ndjson")
    return final


async def _cancel_on_disconnect(request: Request, job: Job) -> None:
    """A client that gives up on a non-streaming answer stops its generation, as in Ollama."""
    while not job.cancelled.is_set():
        if await request.is_disconnected():
            job.cancelled.set()
            return
        await asyncio.sleep(0.2)


async def _answer(request: Request, runner: ModelRunner, body: Common, prompt: str, load: float, *, chat: bool):
    """Run one job; stream NDJSON chunks, or collect them into one response."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[TokenInfo | Completion | EngineError] = asyncio.Queue()
    put = lambda event: loop.call_soon_threadsafe(events.put_nowait, event)  # noqa: E731
    opts = body.options
    job = Job(
        prompt=prompt.encode("utf-8", errors="surrogatepass"),
        options=opts.sampling(),
        num_predict=opts.num_predict if opts.num_predict >= 0 else 1 << 30,
        top_logprobs=body.top_logprobs if body.logprobs else None,
        on_token=put,
        on_done=put,
    )
    assembler = TextAssembler(opts.stops())

    def chunk(text: str, logprobs: list[dict[str, Any]] | None) -> dict[str, Any]:
        out: dict[str, Any] = {"model": body.model, "created_at": _now()}
        out.update({"message": {"role": "assistant", "content": text}} if chat else {"response": text})
        out["done"] = False
        if logprobs is not None:
            out["logprobs"] = logprobs
        return out

    async def chunks() -> AsyncIterator[dict[str, Any]]:
        runner.submit(job)
        try:
            while True:
                event = await events.get()
                if isinstance(event, EngineError):
                    raise ApiError(str(event), event.status)
                if isinstance(event, Completion):
                    tail = assembler.flush()
                    if tail:
                        yield chunk(tail, [] if body.logprobs else None)
                    reason = "stop" if assembler.stopped else event.done_reason
                    yield _final_response(body.model, reason, event, load, chat=chat, stream=False)
                    return
                text = assembler.feed(event.piece)
                yield chunk(text, _logprobs_of(event) if body.logprobs else None)
                if assembler.stopped:
                    job.cancelled.set()
        finally:
            job.cancelled.set()  # a client that went away stops the generation

    if not body.stream:
        parts, logprobs, final = [], [], {}
        watcher = asyncio.create_task(_cancel_on_disconnect(request, job))
        try:
            async for item in chunks():
                if item["done"]:
                    final = item
                else:
                    parts.append(item["message"]["content"] if chat else item["response"])
                    logprobs.extend(item.get("logprobs") or [])
        finally:
            watcher.cancel()
        text = "".join(parts)
        final.update({"message": {"role": "assistant", "content": text}} if chat else {"response": text})
        if body.logprobs:
            final["logprobs"] = logprobs
        return final

    stream = chunks()
    try:  # errors before the first token get a proper status; later ones arrive as a line
        first = await stream.__anext__()
    except ApiError:
        raise
    except StopAsyncIteration:
        first = None

    async def lines() -> AsyncIterator[str]:
        try:
            if first is not None:
                yield json.dumps(first) + "\n"
            async for item in stream:
                yield json.dumps(item) + "\n"
        except ApiError as error:
            yield json.dumps({"error": error.message}) + "\n"
        finally:
            await stream.aclose()

    return StreamingResponse(lines(), media_type="application/x-ndjson")


