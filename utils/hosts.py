"""Which server to talk to: OLLAMA_HOST (or --host) when given, else the embedded one, started here."""

from __future__ import annotations

import atexit

import httpx

from config import Settings
from utils.embedded.models import ModelStore
from utils.embedded.server import EmbeddedServer


class HostError(Exception):
    pass


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
        check_reachable(url, settings.connect_timeout)
        return _with_scheme(url)
    if _embedded is None:
        store = ModelStore(settings.models_dir)
        if not store.installed():
            raise HostError("no OLLAMA_HOST and no bundled model installed: run `python cli.py models install`")
        _embedded = EmbeddedServer()
        _embedded.start()
        atexit.register(_embedded.stop)
    return _embedded.url

