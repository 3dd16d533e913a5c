"""Running the engine from Streamlit: async work on one event loop, the server in use and what it says
about itself, the session's settings, and plain explanations of errors.

Streamlit runs each page script synchronously on its own thread; the engine is async. Every coroutine
runs on one event loop per process, on a thread of its own, so that one `OllamaClient` per server (and
its keep-alive connections and cached /api/version) serves every answer instead of being made again
for each one. Nothing here decodes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import streamlit as st

from config import Settings, get_settings
from utils.app.lifecycle import AppServer, EmbeddedServerDown
from utils.app.store import ConversationStore
from utils.engine.client import (
    ContextFull,
    ModelNotFound,
    OllamaClient,
    ServerTimeout,
    ServerUnreachable,
    parse_version,
)
from utils.engine.events import GenerationError
from utils.engine.memory import EngineMemory
from utils.errors import SpecError
from utils.hosts import HostError

T = TypeVar("T")

PROJECT_DIR = Path(__file__).resolve().parents[2]


# -- one event loop for the process ---------------------------------------------------------------------


@st.cache_resource(show_spinner=False)
def _loop() -> asyncio.AbstractEventLoop:
    """An event loop running forever on a daemon thread: every server client lives on it."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="engine-loop", daemon=True).start()
    return loop


class ScriptCalls:
    """Calls that must happen on the script's thread (Streamlit elements: progress bars), asked for by
    code running on the engine's loop; `run` makes them while it waits."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue = queue.SimpleQueue()

    def wrap(self, function: Callable[..., None]) -> Callable[..., None]:
        return lambda *args: self._calls.put((function, args))

    def drain(self) -> None:
        while True:
            try:
                function, args = self._calls.get_nowait()
            except queue.Empty:
                return
            function(*args)


def run(work: Callable[[], Awaitable[T]], calls: ScriptCalls | None = None) -> T:
    """The result of `work()`, run on the engine's loop; the calling script thread waits for it,
    making `calls` meanwhile. If Streamlit stops the script while it waits, the work is cancelled."""
    future = asyncio.run_coroutine_threadsafe(_call(work), _loop())
    try:
        if calls is not None:
            while not concurrent.futures.wait([future], timeout=0.1).done:
                calls.drain()
            calls.drain()
        return future.result()
    except BaseException:
        future.cancel()
        raise


async def _call(work: Callable[[], Awaitable[T]]) -> T:
    return await work()


def iterate(stream: AsyncIterator[T]) -> Generator[T, None, None]:
    """The items of an async iterator, one by one, each fetched on the engine's loop.

    Streamlit may stop the script at any point (Stop, a rerun, a closed tab): it raises inside the
    script, and the `finally` closes the async generator on the loop, which runs its cleanup (closing
    its streams, so the server stops generating).
    """
    loop = _loop()
    try:
        while True:
            try:
                item = asyncio.run_coroutine_threadsafe(_next(stream), loop).result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose:
            asyncio.run_coroutine_threadsafe(aclose(), loop).result()


async def _next(stream: AsyncIterator[T]) -> T:
    return await anext(stream)


# -- the server ----------------------------------------------------------------------------------------


@st.cache_resource(show_spinner=False)
def engine_memory() -> EngineMemory:
    """What the app's answers learn for the next ones (the engine here: utils/engine/memory.py), one
    for the app's process, as its event loop."""
    return EngineMemory()


@st.cache_resource(show_spinner=False)
def _app_server(ollama_host: str | None, models_dir: str, _settings: Settings) -> AppServer:
    # One per process: the embedded server is started once, again if it dies, and stopped at exit.
    return AppServer(_settings)


def app_server(settings: Settings) -> AppServer:
    """The server in use, kept alive by this process (utils.app.lifecycle)."""
    return _app_server(settings.ollama_host, str(settings.models_dir), settings)


def server_url(settings: Settings) -> str:
    """The server in use, (re)starting the embedded one when it is not running; raises HostError with
    what to do when there is none."""
    keeper = app_server(settings)
    if keeper.owns_server and keeper.pid is None:
        with st.spinner("Starting the embedded server…"):
            return keeper.url()
    return keeper.url()


@st.cache_resource(show_spinner=False, max_entries=16)
def _client(url: str, connect_timeout: float, timeout: float) -> OllamaClient:
    return OllamaClient(url, connect_timeout=connect_timeout, timeout=timeout)


def server(settings: Settings, url: str, timeout: float | None = None) -> OllamaClient:
    """The one client of the server at `url` (per timeout), shared by every session of this process.

    It lives on the engine's loop (use it inside `run` or `iterate` only) and reads /api/version once.
    """
    return _client(url, settings.engine.connect_timeout, timeout or settings.engine.request_timeout)


@dataclass
class ServerInfo:
    url: str
    version: str
    embedded: bool
    batches: bool  # the embedded server says whether it batches nested requests (not with --no-batch)
    models: list[str]

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return parse_version(self.version)


def server_info(settings: Settings) -> ServerInfo:
    """What the server says about itself (read once per client), and its models (read every time, so
    newly installed ones show); raises HostError or ServerError when there is no server."""
    try:
        return _ask_server(settings)
    except ServerUnreachable:
        # The embedded server may have been killed a moment ago: a dying process is not yet reaped
        # (tens of ms, more on a loaded machine), so `server_url` saw it running and the question went
        # to a socket that closed. Once it has ended it is started again, and asked once more.
        keeper = app_server(settings)
        with st.spinner("Starting the embedded server…"):
            if keeper.revive() is None or keeper.pid is None:
                raise
        return _ask_server(settings)


def _ask_server(settings: Settings) -> ServerInfo:
    url = server_url(settings)
    client = server(settings, url)

    async def ask() -> ServerInfo:
        about = await client.about()
        models = await client.models()
        return ServerInfo(url, str(about.get("version", "?")), bool(about.get("embedded")),
                          bool(about.get("batches_nested_requests", True)), sorted(models))

    return run(ask)


def explain(error: BaseException, settings: Settings | None = None) -> str:
    """A plain message that says what happened and what to do, by the kind of error."""
    if isinstance(error, GenerationError) and error.cause is not None:
        return explain(error.cause, settings)  # the server's own error, typed, says what to do
    message = error.message if isinstance(error, SpecError) else str(error) or type(error).__name__
    if isinstance(error, EmbeddedServerDown):
        return f"{message}. Press Restart below to try again."
    if isinstance(error, HostError):
        if settings is not None and not settings.ollama_host:  # the embedded server has no model to serve
            return f"{message}, or install one on the Models page."
        return message
    if isinstance(error, ServerUnreachable):
        if settings is not None and not settings.ollama_host:
            return (f"{message}. The embedded server this app started is not answering: the app starts it again "
                    "if it has stopped, so try again (or press Restart in the sidebar).")
        return (f"{message}. Start the Ollama server at OLLAMA_HOST (or unset OLLAMA_HOST to use the embedded "
                "one), then try again.")
    if isinstance(error, ServerTimeout):
        return (f"{message}. The server may be busy or loading a model: try again, or raise "
                "SPEC_REQUEST_TIMEOUT and restart the app.")
    if isinstance(error, ModelNotFound):
        if settings is None:
            where = "Install it on the Models page (embedded server) or run `ollama pull` for it"
        elif settings.ollama_host:
            where = "Run `ollama pull` for it where the Ollama at OLLAMA_HOST runs"
        else:
            where = "Install it on the Models page"
        return f"{message}. {where}, or pick another model in the sidebar."
    if isinstance(error, ContextFull):
        return context_full(settings)
    return message


def failure_text(error: BaseException, settings: Settings) -> str:
    """Why an answer failed. If the embedded server this app started died meanwhile, it is started again
    at once and the text says so (any other failure: `explain`)."""
    cause = error.cause if isinstance(error, GenerationError) else error
    if isinstance(cause, ServerUnreachable) and (revived := app_server(settings).revive()):
        return revived
    return explain(error, settings)


def context_full(settings: Settings | None = None) -> str:
    size = f" ({settings.engine.num_ctx} tokens)" if settings and settings.engine.num_ctx else ""
    return (f"The conversation no longer fits in the model's context{size}: start a new conversation, "
            "or set a larger SPEC_NUM_CTX (or the model's num_ctx parameter) and restart the app.")


def when(stamp: str) -> str:
    """An ISO timestamp as local time, to the minute."""
    try:
        return datetime.fromisoformat(stamp).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return stamp


def store(settings: Settings) -> ConversationStore:
    return ConversationStore(settings.database_path)


# -- what app.py leaves for the pages ------------------------------------------------------------------


def current():
    """(settings, ServerInfo or None, sidebar Choices or None) for the page being shown."""
    return get_settings(), st.session_state.get("server"), st.session_state.get("choices")


def require_server():
    settings, info, choices = current()
    if info is None or choices is None:
        st.info("No usable server or model: see the message in the sidebar.")
        st.stop()
    return settings, info, choices
