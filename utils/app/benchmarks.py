"""Benchmarks page support: how big a run is and about how long it will take (said before it starts),
progress in words with the time left, and the summary as a person reads it (rounded, with the spread of
the repeats, results within noise marked as such)."""

from __future__ import annotations

import math
import time
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from config import Settings
from utils.app.runtime import explain, store, when
from utils.app.speed import BASELINE_MAX_TOKENS, measure_baseline
from utils.bench import runner as bench
from utils.bench.first_asks import AGAIN, FIRST
from utils.bench.report import measured, verdict
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
    return (f"{size}: at most about {duration(seconds)} at {baseline['tokens_per_second']:.1f} tokens/s, "
            f"{config.target}'s standard speed, measured on this server on {when(baseline['measured_at'])} "
            "(every answer as slow as that, at its token limit).")


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
        self.total = 0

    def __call__(self, done: int, total: int, label: str) -> str:
        self.total = total
        if label == "done":
            return f"All {total} answers done in {duration(time.monotonic() - self.started)}; writing the report…"
        left = ""
        if done:
            elapsed = time.monotonic() - self.started
            left = f" · about {duration(elapsed / done * (total - done))} left"
        return f"Answer {done + 1} of {total}{left} · now: {label}"

    def saved(self) -> str:
        """The bar's last words, once the run has returned: its report is written."""
        return f"All {self.total} answers done and the report saved, in {duration(time.monotonic() - self.started)}."


# The table's columns wide enough for their names and values: Streamlit sizes a column by its first
# rows and cut the longer names ("speculative tokens/s", the verdicts) with an ellipsis.
TABLE_COLUMNS = {name: st.column_config.Column(name, width="small" if name == "asked" else "medium") for name in (
    "configuration", "asked", "standard tokens/s", "speculative tokens/s", "speed-up (median)", "spread (25–75%)",
    "verdict", "drafted tokens", "same text as standard")}


def summary_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The report's summary rows, rounded and named for reading, first asks before answers asked again
    (`asked`: utils/bench/first_asks.py). A speed-up figure only where it was measured beyond noise
    (`measured`); elsewhere the verdict says why not, and the spread stays."""
    table = []
    for row in sorted(rows, key=lambda row: row.get("ask") == AGAIN):  # stable: the report's order within each
        table.append({
            "category": row["category"],
            "configuration": bench.describe(row["engine"], row["drafter"], row["k"]),
            "asked": row.get("ask", FIRST),
            # The verdict beside the figure: it says what a "—" means, and a wide table showed it off screen.
            "speed-up (median)": f"×{row['speedup']:.2f}" if measured(row) else "—",
            "verdict": verdict(row),
            "spread (25–75%)": "—" if not row["drafted"] or row["runs"] < 2
            else f"×{row['speedup_p25']:.2f} – ×{row['speedup_p75']:.2f}",
            "standard tokens/s": _rounded(row["standard_tps"], 1),
            "speculative tokens/s": _rounded(row["speculative_tps"], 1),
            "runs": row["runs"],
            "drafted tokens": row["drafted"],
            "accepted": "—" if not row["drafted"] else f"{row['acceptance']:.0%}",
            "same text as standard": f"{row['identical_rate']:.0%}",
        })
    return table


def asks_text(rows: list[dict[str, Any]]) -> str:
    """What the table's `asked` column means, in words, for this run."""
    if not any(row.get("ask") == AGAIN for row in rows):
        return ("Every speed-up here is of first asks: no drafter had seen an answer to its prompt before "
                "(standard against speculative on each prompt asked for the first time).")
    return ("First ask: standard against speculative on each prompt asked for the first time; the verdicts that "
            "count are these. Asked again: a repeat of a prompt the drafter had already answered in this run "
            "(suffix decoding remembers earlier answers and copies them), shown apart: it is not the speed of a "
            "new question.")


# What every speed-up on the page compares (utils/bench/report.py: summarize, decode_rate, verdict).
SPEEDUP_MEANING = ("Speed-up: a speculative answer's tokens/s after its first token over the standard answer's to "
                   "the same prompt in the same repeat (the first token waits for the prompt, the same work for "
                   "both), the median over the prompts and repeats, its spread the middle half of them (25–75%). "
                   "A figure, a bar and the verdict 'faster' or 'slower' only where that middle half leaves out "
                   "×1.00; elsewhere the verdict says why not.")


def speedup_figure(rows: list[dict[str, Any]]) -> tuple[go.Figure | None, list[str]]:
    """The speed-up per category and configuration, drawn only where it was measured beyond noise; and
    one line per row left out, saying why (under the chart, in full: a chart title cuts it off)."""
    figure = go.Figure()
    left_out = []
    per_category = [row for row in rows if row["category"] != "all"]
    for configuration in dict.fromkeys((r["engine"], r["drafter"], r["k"], r.get("ask", FIRST)) for r in per_category):
        mine = [r for r in per_category if (r["engine"], r["drafter"], r["k"], r.get("ask", FIRST)) == configuration]
        name = bench.describe(*configuration[:3]) + (f" ({AGAIN})" if configuration[3] == AGAIN else "")
        drawn = [r for r in mine if measured(r)]
        left_out += [f"{r['category']}, {name}: {verdict(r)}" for r in mine if not measured(r)]
        if drawn:
            figure.add_bar(name=name, x=[r["category"] for r in drawn],
                           y=[r["speedup"] for r in drawn],
                           error_y={"type": "data", "symmetric": False,
                                    "array": [r["speedup_p75"] - r["speedup"] for r in drawn],
                                    "arrayminus": [r["speedup"] - r["speedup_p25"] for r in drawn]})
    if not figure.data:
        return None, left_out
    figure.add_hline(y=1.0, line_dash="dot")
    # A short title on two lines: a long one is cut mid-word where the chart is narrow.
    figure.update_layout(title={"text": "Speed-up over standard generation<br><sup>median, 25–75% of repeats</sup>"},
                         yaxis_title="× standard", barmode="group", legend={"orientation": "h", "y": -0.2})
    return figure, left_out


def summary_markdown(run: dict[str, Any]) -> str:
    """The run as the page shows it, for download: the report's header (machine, server, prompts) and
    the summary table, a speed-up figure only where one was measured (report.md, utils/bench/report.py,
    gives every configuration's tables the same way)."""
    header = run["report_md"].split("\n## ", 1)[0].rstrip()
    table = summary_table(run["summary"])
    if not table:
        return header + "\n"
    columns = list(table[0])
    lines = [header, "", "## Summary", "", SPEEDUP_MEANING, "", asks_text(run["summary"]), "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join("" if row[c] is None else str(row[c]) for c in columns) + " |" for row in table]
    return "\n".join(lines) + "\n"


def _rounded(value: float, digits: int) -> float | None:
    return None if value != value else round(value, digits)  # NaN (nothing to measure) shows as empty
