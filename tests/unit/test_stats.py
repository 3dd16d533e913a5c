"""Per-answer statistics: counters per round, per-position acceptance and the derived rates by hand."""

from __future__ import annotations

import pytest

from utils.engine.stats import AnswerStats, RoundRecord, acceptance_rate, mean_acceptance_length, merge


def speculative() -> AnswerStats:
    return AnswerStats(mode="speculative", target="qwen2.5-coder:1.5b", drafter="lookup", method="greedy")


def test_rates() -> None:
    assert acceptance_rate(3, 4) == 0.75
    assert acceptance_rate(0, 0) == 0.0
    assert mean_acceptance_length(3, 2) == 2.5
    assert mean_acceptance_length(0, 0) == 0.0
    assert mean_acceptance_length(0, 5) == 1.0


def test_three_drafts_by_hand() -> None:
    stats = speculative()
    stats.observe_round(RoundRecord(k=4, drafted=4, accepted=2, emitted=3, seconds=0.1), 0.02, 0.08)
    assert stats.acceptance_histogram == [0, 0, 1, 0, 0]
    assert stats.position_reached == [1, 1, 1, 0]  # the third piece was checked and rejected
    assert stats.position_accepted == [1, 1, 0, 0]
    assert stats.per_position_acceptance == [1.0, 1.0, 0.0]

    stats.observe_round(RoundRecord(k=2, drafted=2, accepted=2, emitted=3, seconds=0.05), 0.01, 0.04)
    stats.observe_round(RoundRecord(k=3, drafted=3, accepted=0, emitted=1, seconds=0.06), 0.02, 0.04)
    assert stats.drafts == 3
    assert stats.drafted_tokens == 9 and stats.accepted_tokens == 4
    assert stats.acceptance_histogram == [1, 0, 2, 0, 0]
    assert stats.position_reached == [3, 2, 1, 0]
    assert stats.position_accepted == [2, 2, 0, 0]
    assert stats.per_position_acceptance == pytest.approx([2 / 3, 1.0, 0.0])
    assert stats.acceptance_rate == pytest.approx(4 / 9)
    assert stats.mean_acceptance_length == pytest.approx(1 + 4 / 3)
    assert stats.output_tokens == 7
    assert stats.k_history == [4, 2, 3]
    assert stats.draft_seconds == pytest.approx(0.05) and stats.verify_seconds == pytest.approx(0.16)
    assert [r.emitted for r in stats.rounds] == [3, 3, 1]


def test_standard_segments_and_empty_drafts_are_not_drafts() -> None:
    stats = speculative()
    stats.observe_standard(RoundRecord(k=0, emitted=10, seconds=0.5))
    stats.observe_round(RoundRecord(k=4, drafted=0, accepted=0, emitted=0, seconds=0.001), 0.001, 0.0)
    stats.observe_standard(RoundRecord(k=0, emitted=6, seconds=0.3))
    assert stats.drafts == 0 and stats.drafted_tokens == 0
    assert stats.acceptance_histogram == [] and stats.per_position_acceptance == []
    assert stats.acceptance_rate == 0.0 and stats.mean_acceptance_length == 0.0
    assert stats.standard_tokens == 16 and stats.output_tokens == 16
    assert stats.standard_seconds == pytest.approx(0.8)
    assert stats.k_history == [0, 4, 0]


def test_observe_draft_alone() -> None:
    stats = speculative()
    stats.observe_draft(drafted=5, accepted=5)
    stats.observe_draft(drafted=1, accepted=0)
    assert stats.acceptance_histogram == [1, 0, 0, 0, 0, 1]
    assert stats.position_reached == [2, 1, 1, 1, 1]
    assert stats.position_accepted == [1, 1, 1, 1, 1]
    assert stats.per_position_acceptance == [0.5, 1.0, 1.0, 1.0, 1.0]
    assert stats.output_tokens == 0  # a draft is not a round: emitted tokens come with rounds


def test_snapshot_is_a_copy_with_the_speed_so_far() -> None:
    stats = speculative()
    stats.observe_round(RoundRecord(k=2, drafted=2, accepted=1, emitted=2, seconds=0.1))
    snap = stats.snapshot(0.5)
    assert snap.tokens_per_second == 4.0 and snap.total_seconds == 0.5
    assert stats.tokens_per_second == 0.0 and stats.total_seconds == 0.0  # the live object is untouched
    stats.observe_round(RoundRecord(k=2, drafted=2, accepted=2, emitted=3, seconds=0.1))
    assert snap.output_tokens == 2 and len(snap.rounds) == 1 and snap.position_reached == [1, 1]
    assert stats.snapshot(0.0).tokens_per_second == 0.0


def test_finish_and_the_schema_round_trip() -> None:
    stats = speculative()
    stats.observe_round(RoundRecord(k=3, drafted=3, accepted=3, emitted=4, seconds=0.2))
    stats.finish(2.0)
    assert stats.tokens_per_second == 2.0
    again = AnswerStats.model_validate_json(stats.model_dump_json())
    assert again == stats
    assert "per_position_acceptance" in AnswerStats.model_json_schema()["properties"]


def test_merge_adds_the_counters_and_derives_the_rates_again() -> None:
    first = speculative()
    first.observe_round(RoundRecord(k=4, drafted=4, accepted=2, emitted=3, seconds=0.1), 0.02, 0.08)
    first.observe_standard(RoundRecord(k=0, emitted=5, seconds=0.25))
    first.finish(1.0)
    second = speculative()
    second.observe_round(RoundRecord(k=2, drafted=2, accepted=2, emitted=3, seconds=0.05), 0.01, 0.04)
    second.finish(0.5)
    total = merge([first, second], drafter="lookup")
    assert (total.mode, total.drafter) == ("merged", "lookup")
    assert total.output_tokens == 11 and total.standard_tokens == 5
    assert total.drafts == 2 and total.drafted_tokens == 6 and total.accepted_tokens == 4
    assert total.position_reached == [2, 2, 1, 0] and total.position_accepted == [2, 2, 0, 0]
    assert total.acceptance_histogram == [0, 0, 2, 0, 0]
    assert total.per_position_acceptance == [1.0, 1.0, 0.0]
    assert total.acceptance_rate == pytest.approx(4 / 6) and total.mean_acceptance_length == 3.0
    assert total.k_history == [4, 0, 2]
    assert total.total_seconds == 1.5 and total.tokens_per_second == pytest.approx(11 / 1.5)
    assert merge([]).drafts == 0 and merge([]).tokens_per_second == 0.0
