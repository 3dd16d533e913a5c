"""Ollama's model management routes on the embedded server: pull (a catalogue install with Ollama's
progress stream), delete, copy, create (from a local GGUF path, an installed file's digest or a model,
with Modelfile parameters), and honest 501s for what it cannot do (push; blob upload; a Modelfile's
TEMPLATE, SYSTEM, ADAPTER...).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.responses import Response

from utils.api.http import ApiError, json_response, ndjson_line, ndjson_response
from utils.api.schemas import Options
from utils.embedded.http.state import state_of
from utils.embedded.store import names, parameters
from utils.embedded.store.library import LibraryError, copy_model, delete_model, find_blob, register_file
from utils.embedded.store.models import ModelError

PROGRESS_STEP = 1 << 23  # report pull progress every 8 MB
CREATE_UNSUPPORTED = ("quantize", "system", "template", "adapters", "messages", "license", "renderer", "parser")

router = APIRouter()  # included by api.create_app; the routes find the server's state with state_of


class PullBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = ""
    name: str = ""  # the older spelling
    insecure: bool = False  # about TLS to a registry; the catalogue comes through pip, which has its own settings
    stream: bool = True


class NameBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = ""
    name: str = ""


class CopyBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    source: str
    destination: str


class CreateBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = ""
    name: str = ""
    stream: bool = True
    files: dict[str, str] | None = None
    modelfile: str | None = None  # the older API: a Modelfile's text
    path: str | None = None  # the older API: where the Modelfile was, for its relative FROM path
    parameters: dict[str, Any] | None = None


def _failed(error: ModelError) -> ApiError:
    return ApiError(error.message, error.status or 500)


def _statuses(lines: list[dict[str, Any]], stream: bool) -> Response:
    if not stream:
        return json_response(lines[-1])

    async def out() -> AsyncIterator[bytes]:
        yield b"".join(ndjson_line(line) for line in lines)

    return ndjson_response(out())


def _named(body: PullBody | NameBody) -> tuple[str, str]:
    """The name a request gives (`model`, else `name`) and its canonical form; Ollama's 400 if invalid."""
    requested = body.model or body.name
    if (canonical := names.canonical(requested)) is None:
        raise ApiError(f'name "{requested}" is invalid', 400)
    return requested, canonical


@router.post("/api/pull")
async def pull(body: PullBody, request: Request) -> Response:
    state = state_of(request)
    store, pulls = state.store, state.pulls
    _, wanted = _named(body)
    if wanted not in store.catalogue:
        known = ", ".join(store.catalogue)
        raise ApiError(f"pull model manifest: file does not exist: '{wanted}' is not in the embedded "
                       f"server's catalogue ({known}); register your own GGUF with /api/create", 404)
    spec = store.catalogue[wanted]
    lock = pulls.setdefault(wanted, asyncio.Lock())  # a second pull of the same model waits for the first
    events: asyncio.Queue[dict[str, Any] | BaseException | None] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def put(event: dict[str, Any] | BaseException | None) -> None:  # from the installing thread
        loop.call_soon_threadsafe(events.put_nowait, event)

    digest = f"sha256:{spec.sha256}"
    reported = [-PROGRESS_STEP]

    def on_bytes(written: int, total: int) -> None:
        if written - reported[0] >= PROGRESS_STEP or written == total:
            reported[0] = written
            put({"status": f"pulling {spec.sha256[:12]}", "digest": digest, "total": total, "completed": written})

    def install() -> None:
        try:
            store.install(wanted, progress=lambda _line: None, on_bytes=on_bytes)
            on_bytes(spec.size, spec.size)  # an installed model: the whole layer is there
            put(None)
        except BaseException as error:  # noqa: BLE001 - reported to the client as Ollama's error line
            put(error)

    async def progress() -> AsyncIterator[dict[str, Any]]:
        async with lock:
            yield {"status": "pulling manifest"}
            worker = loop.run_in_executor(None, install)
            while (event := await events.get()) is not None:
                if isinstance(event, BaseException):
                    await worker
                    raise ApiError(str(event), getattr(event, "status", 500))
                yield event
            await worker
            for status in ("verifying sha256 digest", "writing manifest", "success"):
                yield {"status": status}

    if not body.stream:
        events_seen = [event async for event in progress()]  # Ollama: only the final status
        return json_response(events_seen[-1])

    async def lines() -> AsyncIterator[bytes]:
        try:
            async for event in progress():
                yield ndjson_line(event)
        except ApiError as error:
            yield ndjson_line({"error": error.message})

    return ndjson_response(lines())


@router.delete("/api/delete")
async def delete(body: NameBody, request: Request) -> Response:
    state = state_of(request)
    models, store = state.models, state.store
    requested, _ = _named(body)
    try:
        name = store.spec(requested).name
    except ModelError:
        raise ApiError(f"model '{requested}' not found", 404) from None
    await models.unload(name, when_due=False)
    try:
        await asyncio.to_thread(delete_model, store, name)
    except ModelError as error:
        raise _failed(error) from None
    return Response(status_code=200)


@router.post("/api/copy")
async def copy(body: CopyBody, request: Request) -> Response:
    store = state_of(request).store
    try:
        await asyncio.to_thread(copy_model, store, body.source, body.destination)
    except ModelError as error:
        raise _failed(error) from None
    return Response(status_code=200)


@router.post("/api/create")
async def create(body: CreateBody, request: Request) -> Response:
    state = state_of(request)
    models, store = state.models, state.store
    name = body.model or body.name
    if not name:
        raise ApiError("model name is required", 400)
    extra = body.model_extra or {}
    unsupported = [field for field in CREATE_UNSUPPORTED if extra.get(field)]
    if unsupported:
        raise ApiError(f"the embedded server creates a model from one GGUF file only; {', '.join(unsupported)} "
                       "cannot be applied (the GGUF's own chat template and defaults are used)", 501)
    source, digest, wanted = _create_source(body, extra)
    canonical = names.canonical(name)
    if canonical is not None and (canonical in models.runners or canonical in models.embedders):
        await models.unload(canonical, when_due=False)
    try:
        if digest is not None:
            blob = find_blob(store, digest)
            if blob is None:
                raise LibraryError(f"blob {digest} not found: the embedded server cannot receive uploaded blobs; "
                                   'create from a local file instead: {"model": NAME, "from": "/path/file.gguf"}')
            spec = await asyncio.to_thread(register_file, store, name, blob, f"/api/create ({digest})",
                                           digest.removeprefix("sha256:"), wanted)
        elif source.startswith(("/", "~")):
            spec = await asyncio.to_thread(register_file, store, name, Path(source), f"/api/create ({source})",
                                           None, wanted)
        else:
            spec = await asyncio.to_thread(copy_model, store, source, name, wanted)
    except ModelError as error:
        raise _failed(error) from None
    return _statuses([{"status": "parsing GGUF"}, {"status": f"using existing layer sha256:{spec.sha256}"},
                      {"status": "writing manifest"}, {"status": "success"}], body.stream)


@router.post("/api/push")
async def push() -> Response:
    raise ApiError("push is not supported by the embedded server: it has no registry to push to", 501)


@router.head("/api/blobs/{digest}")
async def blob_exists(digest: str, request: Request) -> Response:
    return Response(status_code=200 if find_blob(state_of(request).store, digest) else 404)


@router.post("/api/blobs/{digest}")
async def blob_upload(digest: str) -> Response:
    raise ApiError("uploading blobs is not supported by the embedded server; create the model from a local "
                   'GGUF path instead ({"model": NAME, "from": "/path/file.gguf"}), or run: '
                   "python cli.py models add NAME FILE.gguf", 501)


def _create_source(body: CreateBody, extra: dict[str, Any]) -> tuple[str, str | None, dict[str, Any]]:
    """(what to create from: a path or a model name, or the digest of a GGUF among `files`; the
    model's parameters: the Modelfile's, then the `parameters` object's over them)."""
    source = str(extra.get("from") or "")
    wanted: dict[str, Any] = {}
    if body.modelfile:
        source, wanted = read_modelfile(body.modelfile, body.path)
    wanted.update(parameters.checked(body.parameters or {}))
    try:
        Options.model_validate(wanted)  # values a request could not send either (temperature -1)
    except ValidationError as error:
        raise ApiError(f"invalid parameters: {error.errors()[0]['loc'][0]}: {error.errors()[0]['msg']}", 400) from None
    if body.files:
        ggufs = [(file, digest) for file, digest in body.files.items() if file.endswith(".gguf")]
        if len(body.files) != 1 or len(ggufs) != 1:
            raise ApiError("the embedded server creates a model from exactly one .gguf file; safetensors and "
                           "several files are not supported", 501)
        return "", ggufs[0][1], wanted
    if not source:
        raise ApiError("neither 'from' nor 'files' was specified", 400)
    looks_like_a_file = source.lower().endswith(".gguf") or source.startswith(".") or names.canonical(source) is None
    if looks_like_a_file and not source.startswith(("/", "~")):
        raise ApiError(f"give an absolute path to the GGUF file, not a relative one: {source}", 400)
    return source, None, wanted


def _unquoted(value: str) -> str:
    """A Modelfile value without its quotes ("def " keeps its space), as Ollama's parser reads it."""
    for quote in ('"""', '"'):
        if len(value) >= 2 * len(quote) and value.startswith(quote) and value.endswith(quote):
            return value[len(quote) : -len(quote)]
    return value


def read_modelfile(modelfile: str, where: str | None) -> tuple[str, dict[str, Any]]:
    """(the FROM, the PARAMETER lines' parameters) of a Modelfile with only those: other instructions
    (TEMPLATE, SYSTEM, ADAPTER...) cannot be applied here. A value is one line, quoted or not."""
    sources, pairs = [], []
    for line in modelfile.splitlines():
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        instruction, _, argument = text.partition(" ")
        if instruction.upper() == "PARAMETER":
            name, _, value = argument.strip().partition(" ")
            pairs.append((name, _unquoted(value.strip())))
            continue
        if instruction.upper() != "FROM":
            raise ApiError(f"the embedded server supports only FROM and PARAMETER in a Modelfile, not "
                           f"{instruction.upper()}: the GGUF's own chat template is used", 501)
        sources.append(argument.strip())
    if len(sources) != 1:
        raise ApiError("a Modelfile needs exactly one FROM line", 400)
    source = sources[0]
    if where and not source.startswith(("/", "~")) and (source.startswith(".") or source.endswith(".gguf")):
        source = str(Path(where).parent / source)
    return source, parameters.from_text(pairs)
