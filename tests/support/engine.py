"""Answers from the speculative engine itself (no HTTP layer of ours), for the model-backed tests."""

from __future__ import annotations

import copy

from config import Settings
from utils.engine.answer import collect
from utils.engine.client import OllamaClient
from utils.engine.decoder import build_decoder
from utils.engine.memory import EngineMemory
from utils.engine.request import GenerationRequest


def settings(**update) -> Settings:
    """Test settings; generous time limits, so that a busy machine does not end speculation early."""
    return Settings(**{"k_max": 8, "p_min": 0.2, "draft_timeout": 60, "verify_timeout": 120, **update})


async def answer(server_url: str, target: str, drafter: str, request: GenerationRequest,
                 memory: EngineMemory | None = None, **update) -> dict:
    """One answer's text, pieces and statistics; answers given the same `memory` learn from each other."""
    server = OllamaClient(server_url)
    try:
        decoder = await build_decoder(settings(**update).engine, server, target, drafter, memory=memory)
        return await collect(decoder, request)
    finally:
        await server.aclose()


class StandardAnswers:
    """Greedy standard answers of one server, each computed once: greedy decoding makes one a function
    of the model and the request alone, and the equality tests hold several drafters (and trees) to
    the same ones. `await standard(target, request)` gives a copy, for the test to keep or change."""

    def __init__(self, server_url: str):
        self.server_url = server_url
        self.known: dict[tuple[str, str], dict] = {}

    async def __call__(self, target: str, request: GenerationRequest) -> dict:
        key = (target, repr(request))
        if key not in self.known:
            self.known[key] = await answer(self.server_url, target, "none", request)
        return copy.deepcopy(self.known[key])
