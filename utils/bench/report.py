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

from utils.bench.first_asks import AGAIN, FIRST, asks, asks_in_words, remembers_answers
from utils.bench.native import ENGINE as NATIVE
from utils.bench.reasoning import thinking_markdown
from utils.bench.stand_in import stand_in
from utils.engine.drafters import NONE as STANDARD
from utils.engine.stats import AnswerStats, merge

PROJECT = "project"  # the engine a run comes from, unless it is the anchor (NATIVE)


def _plain_runs(data: dict[str, Any]) -> dict[tuple, dict[str, Any]]:
    """Each engine's standard runs, by (engine, prompt id, repeat)."""
    return {(engine_of(r), r["prompt_id"], r["repeat"]): r for r in data["runs"] if r["drafter"] == STANDARD}


def same(run: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether two runs answered alike: the same text, and the same reasoning (a thinking answer's)."""
    return (run["text"], run.get("thinking", "")) == (other["text"], other.get("thinking", ""))


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


def _after_first_token(stats: AnswerStats) -> float:
    """The seconds of an answer after its first token (all of them where that is not known)."""
    ttft = stats.time_to_first_token_s
    return stats.total_seconds - ttft if ttft is not None and stats.total_seconds > ttft else stats.total_seconds


def waits(pairs: list[tuple[AnswerStats, AnswerStats]], whole: bool = False) -> tuple[float, float]:
    """The standard's and the speculative's summed seconds over (standard, speculative) pairs, after
    the first token; `whole`: each answer's wait for its first token included, the longer of the
    pair's two charged to both. That wait is the same work for both (reading the prompt), but only the
    configuration that asks a turn first reads its new part, the other finds it in the server's cache;
    the longer wait is what an agent that asks each turn once would see."""
    reading = sum(max(s.total_seconds - _after_first_token(s), r.total_seconds - _after_first_token(r))
                  for s, r in pairs) if whole else 0.0
    return (sum(_after_first_token(s) for s, _ in pairs) + reading,
            sum(_after_first_token(r) for _, r in pairs) + reading)


def aggregate(pairs: list[tuple[AnswerStats, AnswerStats]], whole: bool = False) -> float:
    """The whole run's ratio over (standard, speculative) pairs: the standard's summed seconds over the
    speculative's (`waits`). Unlike the median of the ratios, a long answer weighs more than a short
    one, as it does in the time the user waits."""
    standard, speculative = waits(pairs, whole)
    return standard / speculative if speculative else float("nan")


def summarize(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per category and configuration (and one 'all' row per configuration), first asks apart
    from answers asked again (`ask`, utils/bench/first_asks.py): a drafter that remembers answers copies
    its earlier answer to the same prompt, which says nothing of a new question.

    Each engine's speculative runs are compared with that engine's own standard runs."""
    standard = _plain_runs(data)
    kinds = {id(run): kind for run, kind in zip(data["runs"], asks(data["runs"]), strict=True)}
    rows = []
    configurations = sorted({(engine_of(r), r["drafter"], r["k"]) for r in data["runs"] if r["drafter"] != STANDARD},
                            key=lambda c: (c[0] != PROJECT, c))
    categories = sorted({r["category"] for r in data["runs"]}) + ["all"]
    for (engine, drafter, k), ask, category in ((c, a, g) for c in configurations for a in (FIRST, AGAIN)
                                                for g in categories):
        runs = [r for r in data["runs"] if (engine_of(r), r["drafter"], r["k"]) == (engine, drafter, k)
                and (category == "all" or r["category"] == category) and kinds[id(r)] == ask
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
            "category": category, "engine": engine, "drafter": drafter, "k": k, "ask": ask, "runs": len(runs),
            "standard_tps": _median([decode_rate(s) for s, _ in pairs]),
            "speculative_tps": _median([decode_rate(r) for _, r in pairs]),
            "speedup": speedup, "speedup_p25": low, "speedup_p75": high, "aggregate": aggregate(pairs),
            "drafted": total.drafted_tokens, "acceptance": total.acceptance_rate,
            "mean_acceptance_length": total.mean_acceptance_length,
            "accepted_per_verification": total.accepted_tokens / total.drafts if total.drafts else float("nan"),
            "wasted": total.drafted_tokens - total.accepted_tokens,
            "identical_rate": sum(same(standard[(engine, r["prompt_id"], r["repeat"])], r)
                                  for r in runs) / len(runs),
            "bound": bound, "of_bound": speedup / bound if bound and bound == bound else float("nan"),
            "mean_k": statistics.fmean(total.k_history or [0]),
            "verifications": total.drafts, "tree_rounds": total.tree_rounds, "branch_tokens": total.branch_tokens,
        })
    return rows


def sessions(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per speculative configuration and multi-turn session (a conversation or an agent session) whose
    every turn has its standard pair: the whole session's time against the same engine's standard
    time, and how many of its turns answered identically; after each configuration's sessions, its
    'all' row: every session's time summed (the aggregate whole-run ratio)."""
    standard = _plain_runs(data)
    grouped: dict[tuple, dict[tuple, list]] = {}  # configuration -> (session, repeat) -> [(standard, run)]
    for run in data["runs"]:
        if run["drafter"] != STANDARD and "conversation" in run:
            mate = standard.get((engine_of(run), run["prompt_id"], run["repeat"]))
            session = grouped.setdefault((engine_of(run), run["drafter"], run["k"]), {})
            session.setdefault((run["conversation"], run["repeat"]), []).append((mate, run))
    rows = []
    for configuration in sorted(grouped, key=lambda c: (c[0] != PROJECT, c)):
        # A session with a turn not yet run by the standard configuration is left out.
        complete = {key: runs for key, runs in sorted(grouped[configuration].items()) if all(m for m, _ in runs)}
        mine = [_session_row(configuration, session, repeat, runs) for (session, repeat), runs in complete.items()]
        if mine:
            every = _session_row(configuration, "all", None, [pair for runs in complete.values() for pair in runs])
            rows += [*mine, {**every, "median_whole": _median([r["whole"] for r in mine])}]
    return rows


def _session_row(configuration: tuple[str, str, str], session: str, repeat: int | None,
                 runs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    pairs = [(stats_of(s), stats_of(r)) for s, r in runs]
    standard, speculative = waits(pairs, whole=True)
    return {**dict(zip(("engine", "drafter", "k"), configuration, strict=True)), "session": session,
            "repeat": repeat, "steps": len(runs), "standard_s": standard, "speculative_s": speculative,
            "whole": aggregate(pairs, whole=True), "after_first_token": aggregate(pairs),
            "identical": sum(same(s, r) for s, r in runs),
            "ask": f", {AGAIN}" if repeat and remembers_answers(configuration[1]) else ""}


def _sessions_markdown(data: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """The multi-turn sections: each configuration's speed-up per category (turn, or agent step kind)
    as median and aggregate, then per session."""
    categories = sorted({r["category"] for r in data["runs"] if "conversation" in r})
    configurations = list(dict.fromkeys((r["engine"], r["drafter"], r["k"], r["ask"]) for r in rows))
    lines = ["## By kind of turn: median (aggregate) speed-up after the first token", "",
             "Median: of the turns' speed-ups, as in the tables above. Aggregate: the standard's summed time "
             "after the first token over the speculative's, on the same turns (a long answer weighs more). "
             "An agent step's kind is its own answer's: a write_file call with the file's content, another "
             "tool call, or a final answer without one.", "",
             "| engine | drafter | K | " + " | ".join(categories) + " | all |",
             "|---|---|---|" + "---|" * (len(categories) + 1)]
    for configuration in configurations:
        cells = {r["category"]: r for r in rows if (r["engine"], r["drafter"], r["k"], r["ask"]) == configuration}
        engine, drafter, k, ask = configuration
        lines.append(f"| {engine} | {_drafter({'drafter': drafter, 'ask': ask})} | {k} | " + " | ".join(
            f"{cells[c]['speedup']:.2f}x ({cells[c]['aggregate']:.2f}x), {cells[c]['runs']}" if c in cells else "-"
            for c in [*categories, "all"]) + " |")
    lines += ["", "## Per session: whole-session time", "",
              "Whole: the standard's time for all the session's turns over the speculative's, each turn's wait "
              "for its first token included: the longer of the two, charged to both (only the configuration that "
              "asks a turn first reads its new part of the prompt; the other finds it in the server's cache). "
              "After first token: without those waits. 'all' sums every session (the aggregate whole-run ratio); "
              "its median is of the sessions' whole ratios.",
              "", "| engine | drafter | K | session | turns | standard s | speculative s | whole | after first token | "
              "identical |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sessions(data):
        name = r["session"] if r["repeat"] in (0, None) else f"{r['session']} (repeat {r['repeat'] + 1}{r['ask']})"
        median = f", median {r['median_whole']:.2f}x" if "median_whole" in r else ""
        lines.append(f"| {r['engine']} | {r['drafter']} | {r['k']} | {name} | {r['steps']} | {r['standard_s']:.1f} | "
                     f"{r['speculative_s']:.1f} | {r['whole']:.2f}x{median} | {r['after_first_token']:.2f}x | "
                     f"{r['identical']}/{r['steps']} |")
    return [*lines, ""]


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
                "identical_rate": sum(same(p, n) for p, n in mine) / len(mine),
            })
    return rows


def _drafter(row: dict) -> str:
    return f"{row['drafter']} ({AGAIN})" if row.get("ask") == AGAIN else row["drafter"]


def _wasted(row: dict) -> str:
    return f"{row['drafted']} ({row['wasted']})" if row["drafted"] else "-"


def _number(value: float, form: str = "{:.2f}") -> str:
    return "-" if value != value or not value else form.format(value)  # nan or 0: not measured


def verdict(row: dict[str, Any]) -> str:
    """What a summary row measured: "faster" or "slower" where the middle half of its repeats (25th to
    75th percentile) leaves out x1.00; else why it has no speed-up figure."""
    if not row["drafted"]:
        return "nothing drafted"
    if row["runs"] < 2:
        return "one run: no spread"
    low, high = row["speedup_p25"], row["speedup_p75"]
    if low <= 1.0 <= high:
        return "within noise"
    return "faster" if low > 1.0 else "slower"


def measured(row: dict[str, Any]) -> bool:
    """Whether a row's speed-up is a result (drawn and reported), not noise drawn as one."""
    return verdict(row) in ("faster", "slower")


def _speedup_cell(row: dict[str, Any]) -> str:
    """The median and its spread where it was measured beyond noise; else the verdict, with the spread."""
    spread = f"{row['speedup_p25']:.2f}-{row['speedup_p75']:.2f}"
    return f"{row['speedup']:.2f}x ({spread})" if measured(row) else f"- ({verdict(row)}: {spread})"


def trees_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """How often a configuration with trees (`--k tree:W`) verified one, and what its branches gave."""
    trees = [r for r in rows if r["category"] == "all" and r["k"].startswith("tree:") and r.get("ask") != AGAIN]
    if not trees:
        return []
    lines = ["## Trees", "", "| drafter | K | verifications | of them trees | accepted tokens from a branch |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['drafter']} | {r['k']} | {r['verifications']} | {r['tree_rounds']} | {r['branch_tokens']} |"
              for r in trees]
    return [*lines, ""]


IN_PROCESS = "; the project engine on it loaded in process, as `cli.py serve` speculates"


def report_markdown(data: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    config, host = data["config"], data.get("server", {})
    lines = [
        f"# Benchmark: {config['target']}",
        "",
        f"- Machine: {data['machine'].get('cpu') or data['machine']['platform']}, {data['machine']['cores']} cores",
        f"- Server: {host.get('url', '?')} (Ollama API {host.get('version', '?')}"
        f"{', embedded llama.cpp' if host.get('embedded') else ''})"
        f"{IN_PROCESS if host.get('in_process') else ''}",
        f"- Prompts: {config['prompts_file']}, repeats: {config['repeat']}, temperature {config['temperature']}",
        f"- Runs: {len(data['runs'])}, started {data['started']}",
    ]
    if model := stand_in(config["target"]):
        lines.append(f"- {config['target']} is a STAND-IN thinking model: {model.base} with a Qwen3-style template "
                     "(utils/bench/stand_in.py), not a reasoning model; quote its figures as a stand-in's")
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
        asks_in_words(data["runs"]),
        "",
    ]
    for category in sorted({r["category"] for r in rows}, key=lambda c: (c == "all", c)):
        lines += [f"## {category}", "",
                  "| engine | drafter | K | standard tok/s | speculative tok/s | speed-up (p25-p75) | acceptance | "
                  "accepted per verification | drafted (wasted) | mean K | bound | of bound | identical |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in (r for r in rows if r["category"] == category):
            lines.append(
                f"| {r['engine']} | {_drafter(r)} | {r['k']} | {r['standard_tps']:.1f} | {r['speculative_tps']:.1f} | "
                f"{_speedup_cell(r)} | "
                f"{format(r['acceptance'], '.0%') if r['drafted'] else '-'} | "
                f"{_number(r['accepted_per_verification'])} | "
                f"{_wasted(r)} | {_number(r['mean_k'], '{:.1f}')} | "
                f"{_number(r['bound'], '{:.2f}x')} | {_number(r['of_bound'], '{:.0%}')} | {r['identical_rate']:.0%} |"
            )
        lines.append("")
    lines += trees_markdown(rows)
    if any("conversation" in r for r in data["runs"]):
        lines += _sessions_markdown(data, rows)
    lines += thinking_markdown(data)
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
    speedup = go.Figure()  # a bar only where the speed-up was measured beyond noise (`measured`)
    for engine, drafter, k, ask in dict.fromkeys((r["engine"], r["drafter"], r["k"], r["ask"]) for r in rows):
        mine = [r for r in rows if (r["engine"], r["drafter"], r["k"], r["ask"]) == (engine, drafter, k, ask)
                and measured(r)]
        label = (f"{drafter} k={k}" if engine == PROJECT else f"{engine} {drafter} k={k}") + (
            f" ({AGAIN})" if ask == AGAIN else "")
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


