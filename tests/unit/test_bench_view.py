"""The Benchmarks page's words and figures: run size and time estimate, progress text, the summary
rounded with its spread and a verdict (no server needed)."""

from __future__ import annotations

from pathlib import Path

from utils.app.benchmarks import ProgressText, duration, estimate, plan_size, summary_table
from utils.bench.runner import BenchConfig

PROMPTS = Path(__file__).resolve().parents[2] / "prompts" / "bench.jsonl"


def row(**changes) -> dict:
    base = {"category": "code", "engine": "project", "drafter": "lookup", "k": "auto", "runs": 4,
            "standard_tps": 20.123, "speculative_tps": 30.456, "speedup": 1.51234, "speedup_p25": 1.3,
            "speedup_p75": 1.7, "drafted": 80, "acceptance": 0.6234, "identical_rate": 1.0}
    return {**base, **changes}


def test_plan_size_counts_prompts_repeats_and_configurations_standard_included():
    config = BenchConfig(PROMPTS, "t", ["lookup"], ks=["auto", "4"], repeat=2, limit=1, max_tokens=10,
                         categories=["code", "edit"])
    assert plan_size(config) == (2 * 2 * 3, 2 * 10 * 2 * 3)


def test_estimate_says_the_size_and_a_time_only_from_a_measured_speed():
    config = BenchConfig(PROMPTS, "smollm2:135m", ["lookup"], repeat=1, limit=1, max_tokens=50, categories=["code"])
    unknown = estimate(config, None)
    assert unknown.startswith("2 answers (2 configurations, standard generation included, × 1 repeat), up to 100 "
                              "tokens.") and "measure it (below) for a time estimate" in unknown
    from utils.app.runtime import when

    known = estimate(config, {"tokens_per_second": 10.0, "measured_at": "2026-01-02T03:04:00+00:00"})
    # 100 tokens / 10 + 2 × 10 s of loading, at a speed that says what it is and when it was measured
    assert known.endswith("at most about 30 s at 10.0 tokens/s, smollm2:135m's standard speed, measured on this "
                          f"server on {when('2026-01-02T03:04:00+00:00')} (every answer as slow as that, at its "
                          "token limit).")


def test_durations_read_as_a_person_says_them():
    assert [duration(s) for s in (1, 42, 95, 3000, 7200)] == ["5 s", "40 s", "2 min", "50 min", "2.0 h"]


def test_progress_text_says_where_it_is_and_the_time_left():
    words = ProgressText()
    assert words(0, 8, "code-01, repeat 1/2: standard") == "Answer 1 of 8 · now: code-01, repeat 1/2: standard"
    words.started -= 20  # 2 answers took 20 s: 6 more take about 60 s
    assert words(2, 8, "code-01, repeat 1/2: lookup, K auto") == (
        "Answer 3 of 8 · about 60 s left · now: code-01, repeat 1/2: lookup, K auto")
    assert words(8, 8, "done").startswith("All 8 answers done in 20 s")


def test_summary_is_rounded_with_its_spread_and_verdict():
    faster, noise, single, idle = summary_table([
        row(), row(speedup_p25=0.9, speedup=1.05), row(runs=1), row(drafted=0, speedup=1.84, acceptance=0.0)])
    assert faster["speed-up (median)"] == "×1.51" and faster["spread (25–75%)"] == "×1.30 – ×1.70"
    assert faster["verdict"] == "faster" and faster["accepted"] == "62%"
    assert faster["standard tokens/s"] == 20.1 and faster["configuration"] == "lookup, K auto"
    assert noise["verdict"] == "within noise"
    assert single["verdict"] == "one run: no spread" and single["spread (25–75%)"] == "—"
    # Nothing drafted: no speed-up figure at all (the ×1.84 is noise, not speculation).
    assert idle["speed-up (median)"] == "—" and idle["verdict"] == "nothing drafted" and idle["accepted"] == "—"
