"""`cli.py bench-load`'s figures and report.md, from its results.json (load.py)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any


def percentile(values: list[float], share: float) -> float | None:
    """The `share` percentile (0.5, 0.95) by the nearest rank, or None of nothing."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered) - 1e-9) - 1))]


def _answer_key(answer: dict[str, Any]) -> tuple:
    return answer["client"], answer["workload"], answer["turn"]


def _said(answer: dict[str, Any]) -> tuple:
    return answer["text"], answer["thinking"], repr(answer["tool_calls"])


def summarize_level(level: dict[str, Any]) -> dict[str, Any]:
    """One N's figures: per mode the tokens, seconds and tokens/s over all its rounds, the on/off ratio;
    per client and mode the median time to first token and the p50/p95 time per token; and the answers
    identical with speculation on and off (matched by pair, client, workload and turn)."""
    modes: dict[str, dict[str, Any]] = {}
    for mode in ("off", "on"):
        rounds = [r for r in level["rounds"] if r["mode"] == mode]
        answers = [a for r in rounds for a in r["answers"]]
        tokens, seconds = sum(a["tokens"] for a in answers), sum(r["seconds"] for r in rounds)
        clients = {}
        for client in sorted({a["client"] for a in answers}):
            own = [a for a in answers if a["client"] == client]
            per_token = [a["per_token_s"] for a in own if a["per_token_s"] is not None]
            clients[client] = {"answers": len(own), "first_token_s": statistics.median(a["first_token_s"] for a in own),
                               "per_token_p50_s": percentile(per_token, 0.5),
                               "per_token_p95_s": percentile(per_token, 0.95)}
        every = [a["per_token_s"] for a in answers if a["per_token_s"] is not None]
        modes[mode] = {"rounds": len(rounds), "answers": len(answers), "tokens": tokens, "seconds": seconds,
                       "tokens_per_s": tokens / seconds if seconds else None, "clients": clients,
                       "per_token_p50_s": percentile(every, 0.5), "per_token_p95_s": percentile(every, 0.95),
                       "first_token_p50_s": percentile([a["first_token_s"] for a in answers], 0.5)}
    by_pair = {mode: {(r["pair"], *_answer_key(a)): _said(a) for r in level["rounds"] if r["mode"] == mode
                      for a in r["answers"]} for mode in ("off", "on")}
    matched = set(by_pair["off"]) & set(by_pair["on"])
    identical = sum(by_pair["off"][key] == by_pair["on"][key] for key in matched)
    off, on = modes["off"], modes["on"]

    def ratio(name: str) -> float | None:
        return on[name] / off[name] if on[name] and off[name] else None
    return {"clients": level["clients"], "modes": modes, "speed_ratio": ratio("tokens_per_s"),
            "p95_ratio": ratio("per_token_p95_s"), "compared": len(matched), "identical": identical}


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def write_load_report(out: Path, data: dict[str, Any]) -> str:
    """report.md in `out`, and its text."""
    config, host = data["config"], data["machine"]
    summaries = [summarize_level(level) for level in data["levels"]]
    lines = [f"# Speculation under load: {config['target']}",
             "",
             f"`{config['prompts']}`, {config['turns'] or 'all'} turn(s) each, "
             f"{config['max_tokens'] or 'each prompt`s'} tokens an answer at most, greedy; "
             f"{config['repeat']} pair(s) of rounds per N, speculation off and on interleaved (off, on, on, off, ...); "
             f"{'`cli.py proxy` in front of `cli.py serve`' if config['proxy'] else '`cli.py serve`'}"
             f"{', drafter ' + config['pair'] if config['pair'] else ''}.",
             f"Machine: {host['cpu']}, {host['cores']} cores; load average at the start "
             f"{', '.join(f'{v:.1f}' for v in data['load_average'])}"
             + (f", at the end {', '.join(f'{v:.1f}' for v in data['load_average_end'])}"
                if data.get("load_average_end") else "")
             + ("; one core held by a busy loop throughout" if config["busy_core"] else "") + ".",
             "",
             "| clients | tok/s off | tok/s on | on/off | first token p50 ms (off / on) "
             "| time per token p50 ms (off / on) | p95 ms (off / on) | p95 on/off | identical |",
             "|---|---|---|---|---|---|---|---|---|"]
    for summary in summaries:
        off, on = summary["modes"]["off"], summary["modes"]["on"]
        lines.append(
            f"| {summary['clients']} | {off['tokens_per_s'] or 0:.1f} | {on['tokens_per_s'] or 0:.1f} "
            f"| {_x(summary['speed_ratio'])} | {_ms(off['first_token_p50_s'])} / {_ms(on['first_token_p50_s'])} "
            f"| {_ms(off['per_token_p50_s'])} / {_ms(on['per_token_p50_s'])} "
            f"| {_ms(off['per_token_p95_s'])} / {_ms(on['per_token_p95_s'])} | {_x(summary['p95_ratio'])} "
            f"| {summary['identical']}/{summary['compared']} |")
    lines += ["", "tok/s: all clients' tokens over the rounds' time (each round from its start to its last answer). "
              "Time per token: an answer's time from its first token to its last, over the tokens after the first.",
              "", "## Each client", "",
              "| clients | client | answers | first token ms (off / on) | time per token p50 ms (off / on) "
              "| p95 ms (off / on) |", "|---|---|---|---|---|---|"]
    for summary in summaries:
        off, on = summary["modes"]["off"]["clients"], summary["modes"]["on"]["clients"]
        for client in sorted(set(off) | set(on)):
            a, b = off.get(client, {}), on.get(client, {})
            lines.append(f"| {summary['clients']} | {client + 1} | {a.get('answers', 0)} / {b.get('answers', 0)} "
                         f"| {_ms(a.get('first_token_s'))} / {_ms(b.get('first_token_s'))} "
                         f"| {_ms(a.get('per_token_p50_s'))} / {_ms(b.get('per_token_p50_s'))} "
                         f"| {_ms(a.get('per_token_p95_s'))} / {_ms(b.get('per_token_p95_s'))} |")
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text)
    return text
