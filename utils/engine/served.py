"""Answers the engine makes inside a speculating server (`cli.py serve`), for the app and the CLI.

Run here, the engine verifies every round over HTTP; `cli.py serve` runs the same engine next to the
model, with no HTTP per round, and streams the answer's events to a client that asks
(utils/proxy/event_stream.py). `ServedDecoder` asks for them with this answer's drafter and draft
settings as headers, and reads them back as the engine's own events, so its `stream` is the
decoder's: the app's pages and the CLI cannot tell the two apart, only the server's clock can.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from utils.burst import DRAFT_K, DRAFT_TOP_K, DRAFTER, P_MIN
from utils.engine.client import OllamaClient
from utils.engine.config import EngineConfig
from utils.engine.decoder import build_decoder
from utils.engine.events import Event, GenerationError, TextEvent, WireEvents
from utils.engine.memory import EngineMemory
from utils.engine.request import GenerationRequest
from utils.engine.target import ServerError


class Decoder(Protocol):
    """What makes an answer's events: SpeculativeDecoder here, or ServedDecoder in the server."""

    def stream(self, request: GenerationRequest) -> AsyncIterator[Event]: ...


class ServedDecoder:
    """`target_model`'s answers made by the engine in `server` with `drafter` ("none": standard)."""

    def __init__(self, server: OllamaClient, target_model: str, drafter: str, config: EngineConfig):
        self.server, self.target_model, self.drafter, self.config = server, target_model, drafter, config

    def headers(self, request: GenerationRequest) -> dict[str, str]:
        return {DRAFTER: self.drafter, P_MIN: str(self.config.p_min), DRAFT_TOP_K: str(self.config.draft_top_k),
                **({DRAFT_K: str(request.k)} if request.k is not None else {})}

    async def stream(self, request: GenerationRequest) -> AsyncIterator[Event]:
        """The answer's events, as the server's engine made them. A failure is the GenerationError the
        engine here would raise: the server's error, typed, with the text so far."""
        chat, body = request.as_ollama(self.target_model)
        wire, text = WireEvents(), ""
        try:
            async for data in self.server.answer_events(chat, body, self.headers(request)):
                event = wire.read(data)
                text += event.text if isinstance(event, TextEvent) else ""
                yield event
        except ServerError as error:
            raise GenerationError.of(error, text) from None


async def answer_decoder(config: EngineConfig, server: OllamaClient, target_model: str, drafter: str,
                         draft_server: OllamaClient | None = None, memory: EngineMemory | None = None) -> Decoder:
    """The decoder for one answer: in the server where it streams the engine's events and drafts
    there too (no separate draft host; the server keeps what it learns), else the engine here
    (build_decoder), learning in `memory`."""
    if draft_server is None and (await server.about()).get("speculation_events"):
        return ServedDecoder(server, target_model, drafter, config)
    return await build_decoder(config, server, target_model, drafter, draft_server, memory)
