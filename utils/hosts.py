"""Which server to talk to: OLLAMA_HOST (or --host) when given, else the embedded one, started here;
and one whole answer on the chosen servers, for the CLI and tests."""

from __future__ import annotations

import atexit
from collections.abc import Callable
from typing import Any

import httpx

from config import Settings
from utils.embedded.server import EmbeddedServer
from utils.embedded.store.models import ModelStore
from utils.engine.answer import collect
from utils.engine.client import OllamaClient
from utils.engine.request import GenerationRequest
from utils.engine.served import answer_decoder
from utils.errors import SpecError


class HostError(SpecError):
    """A server that cannot be used: not reachable, or the embedded one could not start."""


def check_reachable(url: str, timeout: float) -> None:
    try:
        httpx.get(f"{_with_scheme(url)}/api/version", timeout=timeout).raise_for_status()
    except httpx.HTTPError as error:
        raise HostError(
            f"cannot reach the Ollama server at {url} ({type(error).__name__}); start it, fix OLLAMA_HOST, "
            "or unset OLLAMA_HOST to use the embedded server"
        ) from None


def _with_scheme(url: str) -> str:
    return url if "://" in url else f"http://{url}"


_embedded: EmbeddedServer | None = None


def target_host(settings: Settings, explicit: str | None = None) -> str:
    """The URL of the server to use, starting the embedded server once per process if needed."""
    global _embedded
    url = explicit or settings.ollama_host
    if url:
        check_reachable(url, settings.engine.connect_timeout)
        return _with_scheme(url)
    if _embedded is None:
        store = ModelStore(settings.models_dir)
        if not store.installed():
            raise HostError("no OLLAMA_HOST and no bundled model installed: run `python cli.py models install`")
        # `cli.py serve` as a user runs it: speculation on, so that any other client of it (the app's
        # proxy page, a script) gets it too; the engine's own requests opt out (utils/burst.py).
        _embedded = EmbeddedServer(speculation=True)
        _embedded.start()
        atexit.register(_embedded.stop)
    return _embedded.url


def stop_embedded() -> None:
    """Stops the embedded server `target_host` started, if any, and forgets it."""
    global _embedded
    if _embedded is not None:
        atexit.unregister(_embedded.stop)
        _embedded.stop()
        _embedded = None


def servers(settings: Settings, host: str | None = None,
            draft_host: str | None = None) -> tuple[OllamaClient, OllamaClient | None]:
    target = OllamaClient(target_host(settings, host), connect_timeout=settings.engine.connect_timeout,
                          timeout=settings.engine.request_timeout)
    draft = None
    if draft_host:
        draft = OllamaClient(draft_host, connect_timeout=settings.engine.connect_timeout,
                             timeout=settings.engine.draft_timeout)
    return target, draft


async def generate_once(settings: Settings, request: GenerationRequest, *, target: str, drafter: str,
                        host: str | None = None, draft_host: str | None = None,
                        echo: Callable[[str], None] | None = None,
                        echo_thinking: Callable[[str], None] | None = None) -> dict[str, Any]:
    target_server, draft_server = servers(settings, host, draft_host)
    try:
        decoder = await answer_decoder(settings.engine, target_server, target, drafter, draft_server)
        return await collect(decoder, request, echo, echo_thinking)
    finally:
        await target_server.aclose()
        if draft_server:
            await draft_server.aclose()
