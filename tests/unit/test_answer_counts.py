"""Every token shown is counted (issue 52): the engine's text events carry the answer's token count so
far, across a held-back stop string, the thinking split and the wire to the app; and the app's figures
of a stopped answer count the segment that was streaming when Stop came."""

from __future__ import annotations

import pytest

from utils.app.answer_view import Answer
from utils.engine.events import RoundEvent, TextEvent, ThinkingEvent, WireEvents, to_wire
from utils.engine.output import Output
from utils.engine.stats import AnswerStats, RoundRecord
from utils.engine.thinking_answer import ThinkingAnswer


def test_each_text_event_counts_the_tokens_whose_text_it_completes():
    output = Output(stop=["STOP"], max_tokens=100)
    counts = [(e.text, e.tokens) for e in output.add("Hello", "standard")]
    counts += [(e.text, e.tokens) for e in output.add(" wor", "draft", tokens=1)]
    counts += [(e.text, e.tokens) for e in output.add("ld ST", "standard")]  # "ST" held back: maybe a stop
    assert counts == [("Hello", 1), (" wor", 2), ("ld ", 2)]  # "ld ST" is not all out: its token not yet
    counts = [(e.text, e.tokens) for e in output.add("AR", "standard")]
    assert counts == [("ST", 3), ("AR", 4)]
    assert output.shown_tokens == output.tokens_within(len(output.text)) == 4


def test_the_count_crosses_the_wire_and_the_thinking_split():
    wire = WireEvents()
    sent = [TextEvent("x", "draft", 7, 1.5), ThinkingEvent("y", "bonus", 3, 0.5)]
    read = [wire.read(to_wire(event)) for event in sent]
    assert [(type(e).__name__, e.text, e.origin, e.tokens, e.at_seconds) for e in read] == [
        ("TextEvent", "x", "draft", 7, 1.5), ("ThinkingEvent", "y", "bonus", 3, 0.5)]
    assert wire.read({"type": "text", "text": "z", "origin": "standard"}).tokens == 0  # an older sender

    split = ThinkingAnswer(("<think>", "</think>"), "").split
    parts = split(TextEvent("<think>why</think>so", "standard", 5, 2.0))
    assert [(type(p).__name__, p.text, p.tokens, p.at_seconds) for p in parts] == [
        ("ThinkingEvent", "why", 5, 2.0), ("TextEvent", "so", 5, 2.0)]


def rounds_then_a_segment() -> Answer:
    """5 tokens in rounds (3 of them accepted draft), then a standard segment streaming 85 more."""
    answer = Answer(started_as=AnswerStats(mode="speculative", target="t", drafter="suffix"))
    stats = AnswerStats(mode="speculative", target="t", drafter="suffix")
    answer.add(TextEvent("A", "standard", 1, 0.2))
    record = RoundRecord(k=0, emitted=1, seconds=0.2, at_seconds=0.2)
    stats.observe_standard(record)
    answer.round(RoundEvent(record, stats))
    for n, origin in zip(range(2, 6), ["draft", "draft", "draft", "correction"]):
        answer.add(TextEvent(f" t{n}", origin, n, 0.5))
    record = RoundRecord(k=4, drafted=4, accepted=3, emitted=4, seconds=0.3, at_seconds=0.5)
    stats.observe_round(record)
    answer.round(RoundEvent(record, stats))
    for n in range(6, 91):
        answer.add(TextEvent(f" s{n}", "standard", n, 0.5 + (n - 5) * 0.1))
    return answer


def test_stop_counts_the_segment_that_was_streaming():
    answer = rounds_then_a_segment()
    answer.stop()
    assert answer.note == "Stopped after 90 tokens: the partial answer is kept."
    stats = answer.stats
    assert stats.output_tokens == 90 and stats.standard_tokens == 86 and stats.accepted_tokens == 3
    assert stats.total_seconds == pytest.approx(9.0) and stats.tokens_per_second == pytest.approx(10.0)
    assert stats.done_reason == "stopped" and sum(r.emitted for r in stats.rounds) == 90


def test_a_standard_answer_stopped_before_its_one_round_ended_keeps_its_figures():
    answer = Answer(started_as=AnswerStats(mode="standard", target="t"))
    for n in range(1, 31):
        answer.add(TextEvent(" w", "standard", n, n * 0.1))
    answer.stop()
    assert answer.note == "Stopped after 30 tokens: the partial answer is kept."
    assert answer.stats.mode == "standard" and answer.stats.tokens_per_second == pytest.approx(10.0)

    nothing = Answer(started_as=AnswerStats(mode="standard", target="t"))
    nothing.stop()
    assert nothing.stats is None and nothing.note == "Stopped early: no text had been generated."


def test_tokens_held_back_for_a_stop_string_are_not_counted_as_shown():
    answer = rounds_then_a_segment()
    stats = answer.live.model_copy(deep=True)
    record = RoundRecord(k=0, emitted=88, seconds=8.5, at_seconds=9.0)  # 3 not out yet: maybe a stop string
    stats.observe_standard(record)
    answer.round(RoundEvent(record, stats))
    answer.stop()
    assert answer.stats.output_tokens == 90 and answer.note == "Stopped after 90 tokens: the partial answer is kept."


def test_live_figures_count_draft_text_even_before_its_round():
    answer = rounds_then_a_segment()
    answer.add(TextEvent(" d", "draft", 91, 9.1))  # its round's statistics are not in yet
    live = answer.so_far()
    assert live.output_tokens == 91 and live.drafted_tokens == 4 and live.accepted_tokens == 3
