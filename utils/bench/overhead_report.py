"""bench-overhead's tables (overhead.py): the measured medians, and the speed-up they allow,

    S(K, a) = (1 - a^(K+1)) / (1 - a) * T_standard / (K * T_draft + T_burst(K))

for acceptance rates a, with the best K for each; from wall times, and on the embedded server also
from its engine times (an ideal verifier with no orchestration cost), so that the share lost to
orchestration is one number.
"""

from __future__ import annotations

import os
import statistics

from utils.bench.overhead_measure import KS, Row

RATES = (0.6, 0.7, 0.8, 0.9)


def speedup(k: int, a: float, standard: float, draft_k: float, burst_k: float) -> float:
    """S(K, a): expected tokens per round over the round's time, against standard decoding."""
    return (1 - a ** (k + 1)) / (1 - a) * standard / (draft_k + burst_k)


def projection(rows: dict[str, Row], engine: bool, drafting: bool = True) -> list[tuple[float, list[float], int]]:
    """(a, [S for each K], best K) from the medians; `engine` uses the server's engine times; without
    `drafting`, drafts cost nothing (prompt lookup)."""
    def time_of(key: str) -> float:
        if key.startswith("draft") and not drafting:
            return 0.0
        median = rows[key].median()
        return median.engine_ms if engine else median.wall_ms

    table = []
    for a in RATES:
        values = [speedup(k, a, time_of("standard"), time_of(f"draft{k}"), time_of(f"burst{k}")) for k in KS]
        table.append((a, values, KS[max(range(len(KS)), key=values.__getitem__)]))
    return table


def report(result: dict, target: str, draft: str, repeat: int) -> str:
    """One bench's result (overhead_measure.prepare) as the tables `cli.py bench-overhead` prints."""
    rows: dict[str, Row] = result["rows"]
    lines = [
        f"context {result['context']} tokens: target {target}, draft {draft}, "
        f"{'embedded server' if result['embedded'] else 'Ollama ' + str(result['version'])} "
        f"({'in process' if result['path'] == 'in' else 'over HTTP'}), "
        f"medians of {repeat} interleaved rounds, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
        f"{'measurement':44} {'wall ms':>9} {'engine ms':>9} {'outside ms':>10}  (outside: each round's "
        "wall - engine, their median)",
    ]
    for row in rows.values():
        median = row.median()
        lines.append(f"{row.label:44} {median.wall_ms:9.2f} {median.engine_ms:9.2f} {row.outside():10.2f}")
    single = rows["one"].outside()
    for k in KS:
        extra = (rows[f"burst{k}"].outside() - single) / k
        lines.append(f"extra outside time per nested request, K={k}: {extra:.2f} ms")
    for k in KS:
        lines.append(f"draft fixed overhead, K={k}: {rows[f'draft{k}'].outside():.2f} ms")
    for kind, (first, later) in result["proposals"].items():  # asked after every standard token
        lines.append(f"{kind} proposal, K={max(KS)}: {later.median().wall_ms:.3f} ms a token later, "
                     f"{first.median().wall_ms:.2f} ms reading the context")
    if result["embedded"]:  # a burst split into several evaluations pays a whole decode for each
        lines.append("evaluations per burst (median): " + ", ".join(
            f"K={k} {statistics.median(s.evaluations for s in rows[f'burst{k}'].samples):g}" for k in KS))
    tables = [("projected speed-up S(K, a), wall times", projection(rows, engine=False))]
    if result["embedded"]:
        tables.append(("ideal one-decode verifier S(K, a), engine times", projection(rows, engine=True)))
    tables.append(("prompt lookup (drafts cost nothing) S(K, a), wall times", projection(rows, False, False)))
    if result["embedded"]:
        tables.append(("prompt lookup, ideal verifier S(K, a), engine times", projection(rows, True, False)))
    for title, table in tables:
        lines.append(title)
        lines.append(f"{'a':>4} " + " ".join(f"{'K=' + str(k):>6}" for k in KS) + f" {'best K':>7} {'best S':>7}")
        for a, values, best in table:
            lines.append(f"{a:4.1f} " + " ".join(f"{v:6.2f}" for v in values) + f" {best:7d} {max(values):7.2f}")
    if result["embedded"]:
        wall, ideal = tables[0][1], tables[1][1]
        lost = [1 - max(w[1]) / max(i[1]) for w, i in zip(wall, ideal)]
        lines.append("share of the ideal speed-up lost to orchestration (best K each): "
                     + ", ".join(f"a={a:.1f} {share:.0%}" for a, share in zip(RATES, lost)))
    return "\n".join(lines)
