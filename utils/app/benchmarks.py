"""Benchmarks page support: how big a run is and about how long it will take (said before it starts),
progress in words with the time left, and the summary as a person reads it (rounded, with the spread of
the repeats, results within noise marked as such)."""

from __future__ import annotations

import math
import time
from typing import Any

import streamlit as st

from config import Settings
from utils.app.runtime import explain, store
from utils.app.speed import BASELINE_MAX_TOKENS, measure_baseline
from utils.bench import runner as bench
from utils.errors import SpecError

DEFAULT_PROMPTS_PER_CATEGORY = 1  # a first run that takes minutes, not an hour
DEFAULT_REPEATS = 2  # the least that shows a spread
LOAD_SECONDS = 10.0  # per configuration: loading and warming its models (a rough allowance)


def plan_size(config: bench.BenchConfig) -> tuple[int, int]:
    """(answers, tokens at most) of a run: every prompt × repeat × configuration (standard included)."""
    prompts = bench.load_prompts(config)
    per_pass = sum(config.max_tokens or prompt.get("max_tokens", 128) for prompt in prompts)
    configurations = len(config.configurations())
    return len(prompts) * config.repeat * configurations, per_pass * config.repeat * configurations


def estimate(config: bench.BenchConfig, baseline: dict[str, Any] | None) -> str:
    """What a run will do and, where this target's standard speed was measured, about how long it takes
    (an upper bound: answers may stop before their token limit, speculation may be faster)."""
    answers, tokens = plan_size(config)
    size = (f"{answers} answers ({len(config.configurations())} configurations, standard generation included, "
            f"× {config.repeat} repeat{'s' if config.repeat > 1 else ''}), up to {tokens:,} tokens")
    if not baseline:
        return (f"{size}. No standard speed measured for {config.target} on this server yet: measure it (below) "
                "for a time estimate.")
    seconds = tokens / baseline["tokens_per_second"] + LOAD_SECONDS * len(config.configurations())
    return f"{size}: at most about {duration(seconds)} at {baseline['tokens_per_second']:.1f} tokens/s."


def estimate_panel(settings: Settings, url: str, config: bench.BenchConfig) -> None:
    """The run's size and time estimate; where the target's standard speed is unknown, a button that
    measures it (one short standard answer, kept as the Chat page's baseline too)."""
    conversations = store(settings)
    baseline = conversations.baseline(url, config.target)
    st.info(estimate(config, baseline))
    if baseline is None and st.button("Measure the standard speed", key="bench_measure",
                                      help=f"a standard answer of {BASELINE_MAX_TOKENS} tokens on this server"):
        try:
            with st.spinner("Generating a standard answer…"):
                measure_baseline(settings, url, config.target)
        except SpecError as error:
            st.error(explain(error, settings))
            return
        st.rerun()


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(5, round(seconds / 5) * 5):.0f} s"
    if seconds < 90 * 60:
        return f"{math.ceil(seconds / 60):.0f} min"
    return f"{seconds / 3600:.1f} h"


class ProgressText:
    """The progress bar's text: answers done, the time left (from the pace so far), what runs now."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, done: int, total: int, label: str) -> str:
        if label == "done":
            return f"All {total} answers done in {duration(time.monotonic() - self.started)}; writing the report…"
        left = ""
        if done:
            elapsed = time.monotonic() - self.started
            left = f" · about {duration(elapsed / done * (total - done))} left"
        return f"Answer {done + 1} of {total}{left} · now: {label}"


def summary_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The report's summary rows, rounded and named for reading; a speed-up whose middle half of
    repeats (25th to 75th percentile) spans ×1.00 is marked within noise, one with nothing drafted gets
    no figure."""
    table = []
    for row in rows:
        if not row["drafted"]:
            speedup, verdict = "—", "nothing drafted"
        else:
            speedup = f"×{row['speedup']:.2f}"
            low, high = row["speedup_p25"], row["speedup_p75"]
            if row["runs"] < 2:
                verdict = "one run: no spread"
            elif low <= 1.0 <= high:
                verdict = "within noise"
            else:
                verdict = "faster" if low > 1.0 else "slower"
        table.append({
            "category": row["category"],
            "configuration": bench.describe(row["engine"], row["drafter"], row["k"]),
            "runs": row["runs"],
            "standard tokens/s": _rounded(row["standard_tps"], 1),
            "speculative tokens/s": _rounded(row["speculative_tps"], 1),
            "speed-up (median)": speedup,
            "spread (25–75%)": "—" if not row["drafted"] or row["runs"] < 2
            else f"×{row['speedup_p25']:.2f} – ×{row['speedup_p75']:.2f}",
            "verdict": verdict,
            "drafted tokens": row["drafted"],
            "accepted": "—" if not row["drafted"] else f"{row['acceptance']:.0%}",
            "same text as standard": f"{row['identical_rate']:.0%}",
        })
    return table


def _rounded(value: float, digits: int) -> float | None:
    return None if value != value else round(value, digits)  # NaN (nothing to measure) shows as empty
