"""The embedded server's HTTP API: the part of Ollama's API that this project and ordinary clients use.

Shapes, defaults, status codes and error messages follow Ollama (see the README's API notes); the
Ollama front shared with other servers (request bodies, errors, body limit, JSON and NDJSON encoding)
is utils/api. The server knows nothing about speculation; it only makes nested validator requests
cheap (engine.py) and keeps the request path lean (answer.py).
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import datetime
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse
from jinja2.sandbox import ImmutableSandboxedEnvironment
from starlette.responses import Response

from utils.api.http import ApiError, BodyLimit, JSONResponse, install_error_handlers, json_response, now
from utils.api.openai_routes import install_openai
from utils.api.schemas import ChatBody, GenerateBody, ShowBody
from utils.embedded.answer import CountArrivals, answer, final_response
from utils.embedded.context import count_tokens, fit_messages
from utils.embedded.engine import ModelRunner
from utils.embedded.models import ModelError, ModelStore
from utils.embedded.tools import chat_tools, offers_tools, tojson

OLLAMA_VERSION = "0.12.11"  # the Ollama release whose API this server implements
DEFAULT_NUM_CTX = 4096


class Models:
    """Loaded runners by name; a request with another num_ctx reloads the model, as Ollama does."""

    def __init__(self, store: ModelStore, threads: int, batch: bool, fast_batches: bool):
        self.store, self.threads, self.batch, self.fast_batches = store, threads, batch, fast_batches
        self.runners: dict[str, ModelRunner] = {}
        self.lock = asyncio.Lock()

    async def get(self, name: str, num_ctx: int | None = None) -> tuple[ModelRunner, float]:
        wanted = num_ctx or DEFAULT_NUM_CTX  # as in Ollama: a request without num_ctx gets the default
        runner = self.runners.get(name)
        if runner is not None and runner.num_ctx == wanted and not self.lock.locked():
            return runner, 0.0  # the common case: loaded under this very name, nothing to check
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
_jinja.filters["tojson"] = tojson


def render_chat(runner: ModelRunner, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
    """The exact prompt the model's own chat template makes, ending where the assistant speaks."""
    template = runner.metadata.get("tokenizer.chat_template")
    if not template:  # a base model: plain concatenation, as Ollama's default "{{ .Prompt }}"
        return "".join(m["content"] for m in messages)
    try:
        return _jinja.from_string(template).render(
            messages=messages, tools=tools, add_generation_prompt=True, bos_token="", eos_token=""
        )
    except ApiError:
        raise
    except Exception as error:  # noqa: BLE001 - odd extra fields (tool_calls: "abc") must be a 400, not a 500
        raise ApiError(f"template error: {type(error).__name__}: {error}", 400) from None


# -- the app ------------------------------------------------------------------------------------


def create_app(store: ModelStore, threads: int = 2, batch: bool = True, fast_batches: bool = False) -> FastAPI:
    app = FastAPI(title="Embedded Ollama-compatible server", version=OLLAMA_VERSION,
                  default_response_class=JSONResponse)
    app.add_middleware(BodyLimit)
    app.add_middleware(CountArrivals)  # outermost: a request counts from its first byte
    install_error_handlers(app)
    models = Models(store, threads, batch, fast_batches)
    app.state.models = models

    @app.on_event("shutdown")
    async def _close() -> None:
        await models.close()

    @app.get("/")
    async def root() -> Any:
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
            "capabilities": ["completion"] + (["tools"] if offers_tools(runner.metadata.get("tokenizer.chat_template"))
                                              else []),
            "modified_at": entry["modified_at"],
        }

    @app.post("/api/generate")
    async def generate(body: GenerateBody, request: Request) -> Response:
        body.check()
        runner, load = await models.get(body.model, body.options.num_ctx)
        if body.raw:
            prompt = body.prompt
        else:
            messages = ([{"role": "system", "content": body.system}] if body.system else []) + (
                [{"role": "user", "content": body.prompt}] if body.prompt else []
            )
            prompt = render_chat(runner, messages) if messages else ""
        if body.debug_render_only:
            return _rendered(body.model, prompt)
        if not body.prompt:  # Ollama answers an empty prompt by only loading the model
            return final_response(body.model, "load", None, load, chat=False, stream=body.stream)
        return await answer(request, runner, body, prompt, load, chat=False)

    @app.post("/api/chat")
    async def chat(body: ChatBody, request: Request) -> Response:
        body.check()
        runner, load = await models.get(body.model, body.options.num_ctx)
        tools = chat_tools(runner, body)
        messages = [m.model_dump() for m in body.messages]
        prompt, dropped = fit_messages(messages, lambda kept: render_chat(runner, kept, tools),
                                       lambda text: count_tokens(runner, text), runner.num_ctx,
                                       body.truncate is not False) if messages else ("", 0)
        if body.debug_render_only:
            return _rendered(body.model, prompt)
        if not messages:
            return final_response(body.model, "load", None, load, chat=True, stream=body.stream)
        return await answer(request, runner, body, prompt, load, chat=True, tools=tools, dropped_messages=dropped)

    install_openai(app, chat, generate, lambda: [_model_entry(spec) for spec in store.installed()])
    return app


def _rendered(model: str, prompt: str) -> Response:
    """The answer to `_debug_render_only`: the prompt the template made, nothing generated."""
    return json_response({"model": model, "created_at": now(), "_debug_info": {"rendered_template": prompt}})


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
