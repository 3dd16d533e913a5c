"""One answer from start to end, for callers that are not streaming UIs (the CLI, benchmarks, tests)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from config import Settings
from utils.client import OllamaServer
from utils.hosts import target_host
from utils.pairs import build_decoder
from utils.speculative import DoneEvent, GenerationRequest, SpeculativeDecoder, TextEvent


def servers(settings: Settings, host: str | None = None, draft_host: str | None = None) -> tuple[OllamaServer, OllamaServer | None]:
    target = OllamaServer(target_host(settings, host), connect_timeout=settings.connect_timeout,
                          timeout=settings.request_timeout)
    draft = None
    if draft_host:
        draft = OllamaServer(draft_host, connect_timeout=settings.connect_timeout, timeout=settings.draft_timeout)
    return target, draft


async def collect(decoder: SpeculativeDecoder, request: GenerationRequest,
                  echo: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run `request` to the end: {"text", "mode", "pieces": [[text, origin], ...], "stats"}."""
    pieces: list[list[str]] = []
    async for event in decoder.stream(request):
        if isinstance(event, TextEvent):
            pieces.append([event.text, event.origin])
            if echo:
                echo(event.text)
        elif isinstance(event, DoneEvent):
            return {"text": event.text, "mode": event.stats.mode, "pieces": pieces,
                    "stats": event.stats.model_dump()}
    raise RuntimeError("the decoder ended without a result")


async def generate_once(settings: Settings, request: GenerationRequest, *, target: str, drafter: str,
                        host: str | None = None, draft_host: str | None = None,
                        echo: Callable[[str], None] | None = None) -> dict[str, Any]:
    target_server, draft_server = servers(settings, host, draft_host)
    try:
        decoder = await build_decoder(settings, target_server, target, drafter, draft_server)
        return await collect(decoder, request, echo)
    finally:
        await target_server.aclose()
        if draft_server:
            await draft_server.aclose()
