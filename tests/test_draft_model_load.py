"""A draft model's load is never timed as drafting: the drafter loads its model before an answer's rounds.

On a fresh install the first draft of a cold draft model took 2.5 s (the load), the controller counted
it as drafting cost and wrote drafting off (issue 44). Here the draft model is unloaded from the real
embedded server, as keep_alive would, and the drafter is built and prepared as the engine does.
"""

from __future__ import annotations

import time

from tests.support.models import DRAFT, TARGET
from utils.engine.client import OllamaClient
from utils.engine.config import EngineConfig
from utils.engine.drafters import DraftSetup, build_drafter
from utils.engine.memory import EngineMemory
from utils.sampling import GREEDY


async def loaded(server: OllamaClient) -> set[str]:
    return {model.get("name") or model.get("model") for model in await server.running()}


async def test_a_draft_model_is_loaded_before_its_first_draft_is_timed(server_url, client):
    server = OllamaClient(server_url)
    try:
        await client.generate(model=DRAFT, keep_alive=0)  # unloaded, as after keep_alive
        assert DRAFT not in await loaded(server)
        setup = DraftSetup(server, TARGET, server, EngineConfig(), EngineMemory())
        drafter = await build_drafter(DRAFT, setup)  # as build_decoder builds it, before any answer
        assert drafter is not None and DRAFT in await loaded(server)
        assert await drafter.prepare() == 0.0  # held already: nothing asked of the server

        await client.generate(model=DRAFT, keep_alive=0)  # unloaded again between two answers
        load = await drafter.prepare()  # what the decoder asks before an answer's rounds
        assert load > 0 and DRAFT in await loaded(server)
        started = time.perf_counter()
        draft = await drafter.propose("def fibonacci(n):\n", 4, GREEDY)
        assert draft.pieces and time.perf_counter() - started < load  # the draft no longer includes a load
    finally:
        await server.aclose()
