"""A speculative answer asked with `format`: generated standard, constrained, and the statistics say why.

Speculation would verify drafts against the unconstrained model; the grammar lives on the server and
is applied to the whole answer in one standard request instead (utils/engine/decoder.py).
"""

from __future__ import annotations

import json

import jsonschema

from config import get_settings
from tests.support.models import SMALL
from utils.engine.client import OllamaClient
from utils.engine.decoder import FORMAT_REASON, build_decoder
from utils.engine.events import DoneEvent, FallbackEvent, TextEvent
from utils.engine.request import GenerationRequest

SCHEMA = {"type": "object", "required": ["name", "age"],
          "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}
PROMPT = "Write a poem about a cat called Tom who is 3 years old."


async def test_format_is_generated_standard_with_the_reason_in_the_statistics(server_url):
    server = OllamaClient(server_url)
    try:
        decoder = await build_decoder(get_settings().engine, server, SMALL, "lookup")
        events = [event async for event in decoder.stream(GenerationRequest(prompt=PROMPT, max_tokens=60,
                                                                            format=SCHEMA))]
        plain = [event async for event in decoder.stream(GenerationRequest(prompt=PROMPT, max_tokens=20))]
    finally:
        await server.aclose()
    assert isinstance(events[0], FallbackEvent) and events[0].reason == FORMAT_REASON  # said before any text
    done = events[-1]
    assert isinstance(done, DoneEvent)
    jsonschema.validate(json.loads(done.text), SCHEMA)
    assert {e.origin for e in events if isinstance(e, TextEvent)} == {"standard"}
    stats = done.stats
    assert (stats.mode, stats.drafter, stats.drafts) == ("standard", "lookup", 0)
    assert [f.reason for f in stats.fallbacks] == [FORMAT_REASON]
    # Without format the same decoder speculates as before (or the controller, which this process
    # shares with earlier tests, keeps the answer standard because speculation has not paid: its
    # own reason, not format's).
    assert plain[-1].stats.mode == "speculative"
    assert FORMAT_REASON not in [f.reason for f in plain[-1].stats.fallbacks]
    assert not any(isinstance(e, FallbackEvent) and e.reason == FORMAT_REASON for e in plain)
