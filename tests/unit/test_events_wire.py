"""An answer's events survive the wire (`cli.py serve` to the app: events.to_wire, WireEvents) as they were."""

from __future__ import annotations

import json

import pytest

from utils.engine.events import DoneEvent, FallbackEvent, RoundEvent, TextEvent, ThinkingEvent, WireEvents, to_wire
from utils.engine.stats import AnswerStats, RoundRecord


def test_an_answers_events_read_back_equal_and_a_rounds_line_does_not_grow_with_the_answer() -> None:
    live = AnswerStats(mode="speculative", target="t", drafter="suffix", method="greedy")
    events: list = [ThinkingEvent("hm"), FallbackEvent("why")]
    for n in range(40):
        record = RoundRecord(k=4, drafted=4, accepted=n % 5, emitted=n % 5 + 1, seconds=0.1, at_seconds=0.1 * n)
        live.observe_round(record, 0.01, 0.09)
        events += [TextEvent("piece", "draft"), RoundEvent(record, live.snapshot(0.1 * n))]
    live.finish(4.0)
    events.append(DoneEvent("the text", live))
    lines = [json.dumps(to_wire(event)) for event in events]
    wire = WireEvents()
    assert [wire.read(json.loads(line)) for line in lines] == events
    rounds = [line for line in lines if '"round"' in line]
    assert len(rounds[-1]) < 2 * len(rounds[0])  # the rounds so far stay on the reading side


def test_a_line_that_is_not_an_engine_event_is_refused() -> None:
    with pytest.raises(ValueError, match="not an engine event"):
        WireEvents().read({"response": "text"})
