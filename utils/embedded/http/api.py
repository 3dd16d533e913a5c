"""The embedded server's HTTP API: the part of Ollama's API that this project and ordinary clients use.

Shapes, defaults, status codes and error messages follow Ollama (see the README's API notes); the
Ollama front shared with other servers (request bodies, errors, body limit, JSON and NDJSON encoding)
is utils/api. The server knows nothing about speculation; it only makes nested validator requests
cheap (utils/embedded/runtime/runner.py) and keeps the request path lean (answer.py).

Module-level routes (as the proxy's, utils/proxy/app.py) over one `EmbeddedState` on
`app.state.embedded` (state.py); `create_app` builds the state, the app and its middleware.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import PlainTextResponse
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from utils.api.cors import add_cors, origins_from_env
from utils.api.direct import DirectRoutes
from utils.api.http import ApiError, BodyLimit, JSONResponse, install_error_handlers, json_response, now
from utils.api.openai_routes import install_openai
from utils.api.schemas import ChatBody, GenerateBody, ShowBody
from utils.api.shaped_routes import install_shaped
from utils.embedded.http import burst_api, embeddings, management
from utils.embedded.http.answer import CountArrivals, answer, final_response
from utils.embedded.http.capabilities import (
    capabilities,
    fill_in_middle,
    refuse_template_and_context,
    refuse_unsupported,
)
from utils.embedded.http.chat_prompt import fit_messages, render_chat
from utils.embedded.http.state import EmbeddedState, state_of
from utils.embedded.http.thinking import refuse_format, splitter, think_mode
from utils.embedded.http.tools import chat_template, chat_tools
from utils.embedded.runtime import model_file
from utils.embedded.runtime.loaded import LoadedModels
from utils.embedded.runtime.runner import ModelRunner
from utils.embedded.store.models import ModelSpec, ModelStore, load_catalogue
from utils.embedded.store.parameters import command_line, modelfile_lines, show_text

# The Ollama release whose behaviour this server follows (the recordings in tests/data/ollama-recorded/
# are of it). Clients gate features on it (`codex exec --oss` wants 0.13.4 or newer), and the engine's
# own checks (utils/engine/planning.py) only ask for at least a version, so a newer one keeps them.
OLLAMA_VERSION = "0.32.15"

router = APIRouter()


def about(models: LoadedModels) -> dict[str, Any]:
    """`/api/version`: Ollama's field and this server's own. exact_logprobs: top log-probabilities are
    exactly what the sampler draws from (utils/sampling.py samples from the same logits, options in
    Ollama's order), so rejection sampling is exact here."""
    return {"version": OLLAMA_VERSION, "embedded": True, "batches_nested_requests": models.batch,
            "burst_endpoint": models.batch, "exact_logprobs": True}


@router.api_route("/", methods=["GET", "HEAD"])  # Ollama's CLI checks the server with HEAD /
async def root() -> Any:
    return PlainTextResponse("Ollama is running")


@router.api_route("/api/version", methods=["GET", "HEAD"])
async def version(request: Request) -> dict[str, Any]:
    return about(state_of(request).models)


@router.api_route("/api/tags", methods=["GET", "HEAD"])
async def tags(request: Request) -> dict[str, Any]:
    return {"models": model_entries(state_of(request).store)}


@router.get("/api/ps")
async def ps(request: Request) -> dict[str, Any]:
    state = state_of(request)
    models, store = state.models, state.store
    loaded = {**{name: e.num_ctx for name, e in models.embedders.items()},
              **{name: r.num_ctx for name, r in models.runners.items()}}
    return {
        "models": [
            {**{key: value for key, value in _model_entry(store.spec(name)).items() if key != "modified_at"},
             "expires_at": models.residency.expires_at(name),
             "size_vram": models.runners[name].vram_bytes if name in models.runners else 0,
             "context_length": num_ctx}
            for name, num_ctx in loaded.items()
        ]
    }


@router.post("/api/show")
async def show(body: ShowBody, request: Request) -> dict[str, Any]:
    """From the model's file, as Ollama reads it: nothing is loaded, reloaded or kept (model_file.py)."""
    state = state_of(request)
    models, store = state.models, state.store
    name = models.resolve(body.model or body.name)
    path = store.path(name)
    try:
        file = await asyncio.to_thread(model_file.read, path)
    except ValueError as error:
        raise ApiError(f"model '{name}' cannot be read: {error}", 500) from None
    info: dict[str, Any] = {key: _number(value) for key, value in file.metadata.items()}
    info.pop("tokenizer.chat_template", None)
    info["tokenizer.ggml.tokens"] = (await asyncio.to_thread(lambda: file.vocabulary)) if body.verbose else []
    info["tokenizer.ggml.merges"] = (await asyncio.to_thread(lambda: file.merges)) if body.verbose else []
    info["general.parameter_count"] = info.get("general.parameter_count", 0)
    spec = store.spec(name)
    entry = _model_entry(spec)
    # A bundled model's template and system prompt are its Ollama library family's (models.py); a
    # user's GGUF shows its own chat template, as on Ollama.
    template = spec.template or file.metadata.get("tokenizer.chat_template", "{{ .Prompt }}")
    written = [command_line("TEMPLATE", spec.template)] if spec.template else []
    written += [command_line("SYSTEM", spec.system)] if spec.system else []
    return {  # no `license`: Ollama leaves an empty one out, and no model here has one
        "modelfile": "\n".join([f"FROM {path}", *written, *modelfile_lines(spec.parameters)]),
        "parameters": show_text(spec.parameters),
        "template": template,
        **({"system": spec.system} if spec.system else {}),
        "details": entry["details"],
        "model_info": info,
        "capabilities": capabilities(file, spec.template),
        "modified_at": entry["modified_at"],
    }


async def loaded(request: Request, body: GenerateBody | ChatBody, empty: bool, *,
                 chat: bool) -> Response | tuple[ModelRunner, float, bool | None]:
    """After Ollama's checks: its answer to an empty request with keep_alive 0 (the model unloaded),
    else the request's model, loaded (its Modelfile parameters under the request's options), the load
    time, and the request's think mode for it."""
    models = state_of(request).models
    body.check()
    if empty and await models.unload_now(body.model, body.keep_alive):
        return final_response(body.model, "unload", None, 0.0, chat=chat, stream=body.stream)
    runner, load = await models.get(body.model, body.options.num_ctx, body.keep_alive)
    body.options = body.options.under(runner.parameters)
    think = think_mode(body.model, chat_template(runner), _think(body))
    refuse_format(think, body.format)
    return runner, load, think


@router.post("/api/generate")
async def generate(body: GenerateBody, request: Request) -> Response:
    if isinstance(ready := await loaded(request, body, not body.prompt, chat=False), Response):
        return ready
    runner, load, think = ready
    refuse_unsupported(body.model_extra or {})
    refuse_template_and_context(body.template, body.context)
    if body.suffix:
        prompt = fill_in_middle(runner, body.model, body.prompt, body.suffix, system=body.system, raw=body.raw)
    elif body.raw:
        prompt = body.prompt
    else:
        messages = ([{"role": "system", "content": body.system}] if body.system else []) + (
            [{"role": "user", "content": body.prompt}] if body.prompt else []
        )
        prompt = render_chat(runner, messages, think=think) if messages else ""
    if body.debug_render_only:
        return _rendered(body.model, prompt, chat=False)
    if not body.prompt:  # Ollama answers an empty prompt by only loading the model
        return final_response(body.model, "load", None, load, chat=False, stream=body.stream)
    return await answer(request, runner, body, prompt, load, chat=False, thinking=splitter(think, prompt))


@router.post("/api/chat")
async def chat(body: ChatBody, request: Request) -> Response:
    if isinstance(ready := await loaded(request, body, not body.messages, chat=True), Response):
        return ready
    runner, load, think = ready
    tools = chat_tools(runner, body)
    messages = [m.model_dump() for m in body.messages]
    refuse_unsupported(body.model_extra or {}, messages)
    prompt, dropped = fit_messages(messages, lambda kept: render_chat(runner, kept, tools, think),
                                   runner.count_tokens, runner.num_ctx,
                                   body.truncate is not False) if messages else ("", 0)
    if body.debug_render_only:
        return _rendered(body.model, prompt, chat=True)
    if not messages:
        return final_response(body.model, "load", None, load, chat=True, stream=body.stream)
    return await answer(request, runner, body, prompt, load, chat=True, tools=tools, dropped_messages=dropped,
                        thinking=splitter(think, prompt))


# -- the app ------------------------------------------------------------------------------------


class Front(Protocol):
    """A speculating front (`cli.py serve`, utils/proxy/front.py): ASGI middleware made from the
    server's own stack, its loaded models and its `/api/version`, and put above that stack (inside
    CORS). The server itself stays free of speculation; `cli.py serve` composes the front above it
    (utils/proxy/in_process.py)."""

    def __call__(self, app: ASGIApp, /, models: LoadedModels, about: dict[str, Any]) -> ASGIApp: ...


class WithApp:
    """ASGI middleware under the speculating front: the front's own requests to this stack
    (http/target.py) are made in process, without the `app` that Starlette puts in the scope of every
    request it receives, and the routes find their state through it."""

    def __init__(self, app: ASGIApp, server: FastAPI):
        self.app, self.server = app, server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope.setdefault("app", self.server)
        await self.app(scope, receive, send)


def create_app(store: ModelStore, threads: int = 2, batch: bool = True, fast_batches: bool = False,
               gpu_layers: int = -1, parallel: int = 4, front: Front | None = None) -> FastAPI:
    state = EmbeddedState(LoadedModels(store, threads, batch, fast_batches, gpu_layers, parallel))
    models = state.models

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        """keep_alive's reaper runs while the server does; the models are freed when it stops."""
        models.residency.start()
        try:
            yield
        finally:
            await models.close()

    app = FastAPI(title="Embedded Ollama-compatible server", version=OLLAMA_VERSION,
                  default_response_class=JSONResponse, lifespan=lifespan)
    install_error_handlers(app)
    app.state.embedded = state
    app.state.models = models  # what utils/bench/in_process.py drives
    for routes in (embeddings.router, management.router, burst_api.router, router):  # in the order they match
        app.include_router(routes)
    install_openai(app, chat, generate, functools.partial(model_entries, store))
    install_shaped(app, chat)  # /v1/messages and /v1/responses, through the same chat handler
    # Middleware, innermost first. The requests of a speculative round skip FastAPI's stack (direct.py).
    app.add_middleware(BodyLimit)
    app.add_middleware(DirectRoutes, routes={"/api/generate": (GenerateBody, generate),
                                             burst_api.PATH: (burst_api.BurstBody, burst_api.burst)})
    app.add_middleware(CountArrivals)  # a request counts from its first byte
    if front is not None:  # outside the arrival count: a speculated answer is no request still arriving
        app.add_middleware(WithApp, server=app)
        app.add_middleware(front, models=models, about=about(models))
    add_cors(app, origins_from_env())
    return app


def _think(body: ChatBody | GenerateBody) -> Any:
    return (body.model_extra or {}).get("think")


def _rendered(model: str, prompt: str, *, chat: bool) -> Response:
    """The answer to `_debug_render_only`: the prompt the template made, nothing generated (as Ollama:
    an empty message or response, `done: false`)."""
    empty: dict[str, Any] = {"message": {"role": "", "content": ""}} if chat else {"response": ""}
    return json_response({"model": model, "created_at": now(), **empty, "done": False,
                          "_debug_info": {"rendered_template": prompt}})


def _number(value: str) -> Any:
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    if re.fullmatch(r"-?\d+\.\d*(e-?\d+)?", value):
        return float(value)
    return value


def model_entries(store: ModelStore) -> list[dict[str, Any]]:
    """`/api/tags`' list (and `/v1/models`'): the installed models."""
    return [_model_entry(spec) for spec in store.installed()]


@functools.cache
def _catalogue_files() -> dict[str, ModelSpec]:
    return {spec.sha256: spec for spec in load_catalogue().values()}


def _model_entry(spec: ModelSpec) -> dict[str, Any]:
    # A copy (`/api/create` FROM a model, `/api/copy`) serves its base's file: its details are the
    # base's, as Ollama reads them from the file, not guessed from the copy's own name.
    base = _catalogue_files().get(spec.sha256, spec)
    tag = base.name.split(":")[-1]
    quant = re.search(r"(Q\d_K_[MS]|Q\d_\d|Q\d_K|F16)", base.file, re.I)
    return {
        "name": spec.name,
        "model": spec.name,
        "modified_at": "2026-01-01T00:00:00Z",
        "size": spec.size,
        "digest": spec.sha256,
        "details": {
            "parent_model": "",
            "format": "gguf",
            "family": base.family.rstrip("0123456789.").split("-")[0],
            "families": [base.family],
            # Catalogue tags are sizes ("135m"); a registered name's tag may be anything ("latest").
            "parameter_size": tag.upper() if re.fullmatch(r"\d+(\.\d+)?[bm]", tag) else "unknown",
            "quantization_level": quant.group(1).upper() if quant else "unknown",
        },
    }
