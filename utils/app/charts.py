"""The charts of one answer, finished or live: acceptance per round and per draft position, and
tokens/s over time against the standard baseline."""

from __future__ import annotations

import itertools
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from utils.app.speed import speedup_so_far
from utils.engine.stats import AnswerStats

ACCEPTED_COLOUR = "rgba(46, 160, 67, 0.9)"  # the green of accepted draft tokens, for bars
REJECTED_COLOUR = "rgba(150, 150, 150, 0.45)"
CHART_REFRESH_SECONDS = 0.3  # redraw live charts at most this often: each redraw is sent to the browser

_chart_numbers = itertools.count()


def chart_key() -> str:
    """A fresh key per live chart update: two identical figures in one run would otherwise clash."""
    return f"live-chart-{next(_chart_numbers)}"


def answer_figure(stats: AnswerStats, baseline: dict[str, Any] | None, asked_again: bool = False) -> go.Figure:
    """Acceptance per round and per draft position, and tokens/s over time against the baseline.

    `stats` is finished or live (a snapshot: the rounds so far); `asked_again`: a repeated question."""
    rounds = stats.rounds
    speculative = stats.mode == "speculative"
    titles = (["Draft tokens per round", "Acceptance by draft position"] if speculative else []) + ["Tokens/s"]
    figure = make_subplots(rows=1, cols=len(titles), subplot_titles=titles)
    if speculative:
        drafted = [(number, r) for number, r in enumerate(rounds, start=1) if r.k and r.drafted]
        numbers = [number for number, _ in drafted]
        figure.add_bar(x=numbers, y=[r.accepted for _, r in drafted], name="accepted",
                       marker_color=ACCEPTED_COLOUR, row=1, col=1)
        figure.add_bar(x=numbers, y=[r.drafted - r.accepted for _, r in drafted], name="rejected",
                       marker_color=REJECTED_COLOUR, row=1, col=1)
        positions = stats.per_position_acceptance
        figure.add_bar(x=list(range(1, len(positions) + 1)), y=positions, name="accepted share",
                       marker_color="rgba(31, 119, 180, 0.8)", showlegend=False, row=1, col=2)
        figure.update_yaxes(range=[0, 1], tickformat=".0%", row=1, col=2)
        figure.update_xaxes(title_text="round", row=1, col=1)
        figure.update_xaxes(title_text="position", dtick=1, row=1, col=2)
    times, rates, tokens = [], [], 0
    for record in rounds:
        tokens += record.emitted
        if record.at_seconds > 0:
            times.append(record.at_seconds)
            rates.append(tokens / record.at_seconds)
    column = len(titles)
    figure.add_scatter(x=times, y=rates, mode="lines+markers", name="tokens/s", row=1, col=column)
    figure.update_xaxes(title_text="seconds", row=1, col=column)
    if baseline:
        figure.add_hline(y=baseline["tokens_per_second"], line_dash="dash", line_color="grey",
                         annotation_text="standard baseline", row=1, col=column)
    rate = rates[-1] if rates else None
    headline = speedup_so_far(stats, baseline, rate, asked_again) if speculative else "standard generation"
    figure.update_layout(barmode="stack", height=280, margin=dict(l=10, r=10, t=60, b=10), title=headline,
                         title_font_size=14, legend=dict(orientation="h", y=-0.3))
    return figure


def stats_rows(stats: AnswerStats) -> list[dict[str, str]]:
    """An answer's statistics as a table a person reads: each figure, its value, and what it counts."""
    rows = [("how it was made", stats.mode + (f", drafter {stats.drafter}" if stats.drafter else "")
             + (f", {stats.method} verification" if stats.method else ""), "standard: the target alone"),
            ("why it ended", stats.done_reason or "—", "stop: the model's end; length: Max tokens; stopped: Stop"),
            ("tokens", str(stats.output_tokens), "the answer's tokens, its reasoning included"),
            ("thinking tokens", str(stats.thinking_tokens), "of those, the reasoning's"),
            ("prompt tokens", str(stats.prompt_tokens), "the conversation so far, as the target counted it"),
            ("tokens/s", f"{stats.tokens_per_second:.1f}", "tokens ÷ seconds generating (loading not counted)"),
            ("seconds generating", f"{stats.total_seconds:.2f}", "from the request to the last token"),
            ("first token after", "—" if (first := stats.time_to_first_token_s) is None else f"{first:.2f} s",
             "the prompt's evaluation and the first token"),
            ("loading", f"{stats.load_seconds:.2f} s", "loading the models first (not in seconds generating)")]
    if stats.mode != "standard":
        rows += [("drafted tokens", str(stats.drafted_tokens), f"guessed by the drafter, in {stats.drafts} drafts"),
                 ("accepted draft tokens", str(stats.accepted_tokens),
                  f"{stats.acceptance_rate:.0%} of the drafted: the green text"),
                 ("tokens per verification", f"{stats.mean_acceptance_length:.2f}",
                  "1 + accepted ÷ drafts: tokens each check of a draft gave"),
                 ("corrections and bonus tokens", f"{stats.correction_tokens} + {stats.bonus_tokens}",
                  "the target's own token after a rejected draft, and after a whole one"),
                 ("standard tokens", str(stats.standard_tokens), "generated without a draft"),
                 ("drafting / verifying", f"{stats.draft_seconds:.2f} s / {stats.verify_seconds:.2f} s",
                  "time spent guessing, and checking the guesses")]
    return [{"figure": figure, "value": value, "what it counts": meaning} for figure, value, meaning in rows]
