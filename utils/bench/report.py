"""The benchmark's analysis: speed-ups with spread, the bound, the report and the plots, all made from
results.json alone (so a stored run can be re-reported, and tested without a model).

Speed-up is the median, over prompts and repeats, of speculative tokens/s divided by the standard
tokens/s of the same prompt and repeat. The bound is what the speculative rounds themselves allow:
(tokens per speculative round / seconds per speculative round) x seconds per standard token.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from utils.bench.native import ENGINE as NATIVE
from utils.engine.drafters import NONE as STANDARD
from utils.engine.stats import AnswerStats, merge

PROJECT = "project"  # the engine a run comes from, unless it is the anchor (NATIVE)


def _plain_runs(data: dict[str, Any]) -> dict[tuple, dict[str, Any]]:
    """Each engine's standard runs, by (engine, prompt id, repeat)."""
    return {(engine_of(r), r["prompt_id"], r["repeat"]): r for r in data["runs"] if r["drafter"] == STANDARD}


def engine_of(run: dict[str, Any]) -> str:
    return run.get("engine", PROJECT)  # results.json from before the anchor existed has no engine


def stats_of(run: dict[str, Any]) -> AnswerStats:
    """A stored run's statistics as the one AnswerStats schema (older files lack a few fields)."""
    known = {"mode": "standard" if run["drafter"] == STANDARD else "speculative", "target": run.get("target", ""),
             "engine": engine_of(run)}
    return AnswerStats.model_validate({**known, **run["stats"]})


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"), float("nan"))
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def decode_rate(stats: AnswerStats) -> float:
    """Tokens per second after the first token: what speculation changes. The first token waits for the
    prompt to be read, the same work for every configuration, but not equally often from the server's
    cache: in a conversation the configuration that asks a turn first reads its history cold, and
    whole-answer tokens/s then credits or blames the order of the runs (by 10% and more here)."""
    ttft = stats.time_to_first_token_s
    if ttft is None or stats.output_tokens < 2 or stats.total_seconds <= ttft:
        return stats.tokens_per_second
    return (stats.output_tokens - 1) / (stats.total_seconds - ttft)


def summarize(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per category and configuration (and one 'all' row per configuration).

    Each engine's speculative runs are compared with that engine's own standard runs."""
    standard = _plain_runs(data)
    rows = []
    configurations = sorted({(engine_of(r), r["drafter"], r["k"]) for r in data["runs"] if r["drafter"] != STANDARD},
                            key=lambda c: (c[0] != PROJECT, c))
    categories = sorted({r["category"] for r in data["runs"]}) + ["all"]
    for engine, drafter, k in configurations:
        for category in categories:
            runs = [r for r in data["runs"] if (engine_of(r), r["drafter"], r["k"]) == (engine, drafter, k)
                    and (category == "all" or r["category"] == category)
                    and (engine, r["prompt_id"], r["repeat"]) in standard]
            if not runs:
                continue
            pairs = [(stats_of(standard[(engine, r["prompt_id"], r["repeat"])]), stats_of(r)) for r in runs]
            speedups = [decode_rate(s) and decode_rate(r) / decode_rate(s) for s, r in pairs]
            total = merge([r for _, r in pairs])
            spec_rounds = [x for _, r in pairs for x in r.rounds if x.k > 0 and x.drafted > 0]
            std_seconds_per_token = _median([s.standard_seconds / s.output_tokens for s, _ in pairs if s.output_tokens])
            bound = float("nan")
            if spec_rounds:
                tokens_per_second = sum(x.emitted for x in spec_rounds) / sum(x.seconds for x in spec_rounds)
                bound = tokens_per_second * std_seconds_per_token
            low, high = _quartiles(speedups)
            speedup = _median(speedups)
            rows.append({
                "category": category, "engine": engine, "drafter": drafter, "k": k, "runs": len(runs),
                "standard_tps": _median([decode_rate(s) for s, _ in pairs]),
                "speculative_tps": _median([decode_rate(r) for _, r in pairs]),
                "speedup": speedup, "speedup_p25": low, "speedup_p75": high,
                "drafted": total.drafted_tokens, "acceptance": total.acceptance_rate,
                "mean_acceptance_length": total.mean_acceptance_length,
                "accepted_per_verification": total.accepted_tokens / total.drafts if total.drafts else float("nan"),
                "wasted": total.drafted_tokens - total.accepted_tokens,
                "identical_rate": sum(standard[(engine, r["prompt_id"], r["repeat"])]["text"] == r["text"]
                                      for r in runs) / len(runs),
                "bound": bound, "of_bound": speedup / bound if bound and bound == bound else float("nan"),
                "mean_k": statistics.fmean(total.k_history or [0]),
            })
    return rows


def plain_decoding(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per category (and 'all'): the project's standard generation against llama.cpp's plain decoding
    of the same prompts and repeats. Empty without a native run."""
    plain = _plain_runs(data)
    pairs = [(r, plain[(NATIVE, r["prompt_id"], r["repeat"])]) for (engine, *_), r in plain.items()
             if engine == PROJECT and (NATIVE, r["prompt_id"], r["repeat"]) in plain]
    rows = []
    for category in sorted({p["category"] for p, _ in pairs}) + ["all"]:
        mine = [(p, n) for p, n in pairs if category == "all" or p["category"] == category]
        if mine:
            rows.append({
                "category": category, "runs": len(mine),
                "project_tps": _median([p["stats"]["tokens_per_second"] for p, _ in mine]),
                "native_tps": _median([n["stats"]["tokens_per_second"] for _, n in mine]),
                "identical_rate": sum(p["text"] == n["text"] for p, n in mine) / len(mine),
            })
    return rows


def _wasted(row: dict) -> str:
    return f"{row['drafted']} ({row['wasted']})" if row["drafted"] else "-"


def _number(value: float, form: str = "{:.2f}") -> str:
    return "-" if value != value or not value else form.format(value)  # nan or 0: not measured


def report_markdown(data: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    config, host = data["config"], data.get("server", {})
    lines = [
        f"# Benchmark: {config['target']}",
        "",
        f"- Machine: {data['machine'].get('cpu') or data['machine']['platform']}, {data['machine']['cores']} cores",
        f"- Server: {host.get('url', '?')} (Ollama API {host.get('version', '?')}"
        f"{', embedded llama.cpp' if host.get('embedded') else ''})",
        f"- Prompts: {config['prompts_file']}, repeats: {config['repeat']}, temperature {config['temperature']}",
        f"- Runs: {len(data['runs'])}, started {data['started']}",
    ]
    if consistency := data.get("self_consistency"):
        same = sum(pair["same"] for pair in consistency)
        lines.append(f"- Server self-consistency: {same} of {len(consistency)} greedy standard answers "
                     f"({same / len(consistency):.0%}) were the same when asked again with other requests between; "
                     "'identical' below can be no better than this")
    if "native" in data:
        lines.append(f"- Anchor: llama-server from {data['native']['anchor']}, weight repacking on; "
                     "its rows compare its speculative decoding with its own plain decoding")
    lines += [
        "",
        "Speed-up: median of speculative / standard tokens/s after the first token (the prompt's reading is "
        "the same work for both, but not equally often from the cache) over the same prompts and repeats "
        "(p25-p75).",
        "Bound: the speed-up the measured speculative rounds allow (tokens per round / round time x standard "
        "time per token). Identical: greedy answers equal to the same engine's standard answer. Accepted per "
        "verification: drafted tokens accepted per draft verified (vLLM's mean acceptance length is this + 1; "
        "llama.cpp's from its log); wasted: drafted tokens not accepted.",
        "",
    ]
    for category in sorted({r["category"] for r in rows}, key=lambda c: (c == "all", c)):
        lines += [f"## {category}", "",
                  "| engine | drafter | K | standard tok/s | speculative tok/s | speed-up (p25-p75) | acceptance | "
                  "accepted per verification | drafted (wasted) | mean K | bound | of bound | identical |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in (r for r in rows if r["category"] == category):
            lines.append(
                f"| {r['engine']} | {r['drafter']} | {r['k']} | {r['standard_tps']:.1f} | {r['speculative_tps']:.1f} | "
                f"{r['speedup']:.2f}x ({r['speedup_p25']:.2f}-{r['speedup_p75']:.2f}) | "
                f"{format(r['acceptance'], '.0%') if r['drafted'] else '-'} | "
                f"{_number(r['accepted_per_verification'])} | "
                f"{_wasted(r)} | {_number(r['mean_k'], '{:.1f}')} | "
                f"{_number(r['bound'], '{:.2f}x')} | {_number(r['of_bound'], '{:.0%}')} | {r['identical_rate']:.0%} |"
            )
        lines.append("")
    plain = plain_decoding(data)
    if plain:
        lines += ["## Plain decoding: the project's standard generation against llama-server", "",
                  "| category | runs | project tok/s | llama.cpp tok/s | project / llama.cpp | identical |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['category']} | {r['runs']} | {r['project_tps']:.1f} | {r['native_tps']:.1f} | "
                  f"{r['project_tps'] / r['native_tps']:.2f}x | {r['identical_rate']:.0%} |" for r in plain]
        lines.append("")
    return "\n".join(lines)


def figures(data: dict[str, Any]) -> dict[str, Any]:
    """Plotly figures: speed-up per category and drafter, acceptance by position, tokens/s against K."""
    import plotly.graph_objects as go

    rows = [r for r in summarize(data) if r["category"] != "all"]
    speedup = go.Figure()
    for engine, drafter, k in dict.fromkeys((r["engine"], r["drafter"], r["k"]) for r in rows):
        mine = [r for r in rows if (r["engine"], r["drafter"], r["k"]) == (engine, drafter, k)]
        label = f"{drafter} k={k}" if engine == PROJECT else f"{engine} {drafter} k={k}"
        speedup.add_bar(name=label, x=[r["category"] for r in mine], y=[r["speedup"] for r in mine],
                        error_y={"type": "data", "symmetric": False,
                                 "array": [r["speedup_p75"] - r["speedup"] for r in mine],
                                 "arrayminus": [r["speedup"] - r["speedup_p25"] for r in mine]})
    speedup.add_hline(y=1.0, line_dash="dot")
    speedup.update_layout(title="Speed-up over standard generation", yaxis_title="x standard", barmode="group")

    # llama-server reports no per-draft detail: the other two plots show the project's runs only.
    project = [r for r in data["runs"] if engine_of(r) == PROJECT]
    acceptance = go.Figure()
    for drafter in sorted({r["drafter"] for r in project if r["drafter"] != STANDARD}):
        rates = merge([stats_of(r) for r in project if r["drafter"] == drafter]).per_position_acceptance
        longest = len(rates)
        acceptance.add_scatter(name=drafter, x=list(range(1, longest + 1)), y=rates, mode="lines+markers")
    acceptance.update_layout(title="Acceptance by draft position", xaxis_title="position", yaxis_title="accepted",
                             yaxis_range=[0, 1.05])

    by_k = go.Figure()
    for drafter in sorted({r["drafter"] for r in project if r["drafter"] != STANDARD}):
        runs = [r for r in project if r["drafter"] == drafter]
        by_k.add_scatter(name=drafter, mode="markers",
                         x=[statistics.fmean(r["stats"]["k_history"] or [0]) for r in runs],
                         y=[r["stats"]["tokens_per_second"] for r in runs])
    standard = [r["stats"]["tokens_per_second"] for r in project if r["drafter"] == STANDARD]
    if standard:
        by_k.add_hline(y=_median(standard), line_dash="dot", annotation_text="standard (median)")
    by_k.update_layout(title="Tokens/s against draft length", xaxis_title="mean K of the answer",
                       yaxis_title="tokens/s")
    return {"speedup": speedup, "acceptance_by_position": acceptance, "tokens_per_second_by_k": by_k}


def write_report(out_dir: Path, data: dict[str, Any]) -> None:
    rows = summarize(data)
    (out_dir / "report.md").write_text(report_markdown(data, rows))
    for name, figure in figures(data).items():
        figure.write_html(out_dir / f"{name}.html", include_plotlyjs="directory")


