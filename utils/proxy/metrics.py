"""What the proxy did, for `GET /metrics` (Prometheus text) and the app's live traffic page.

Counters follow vLLM's speculative-decoding metrics (drafts, draft tokens, accepted tokens, accepted
tokens per position), labelled by target and drafter, and are added from each answer's own
AnswerStats, so over any run they sum to the answers' statistics.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from typing import Any

from utils.engine.stats import AnswerStats

RECENT = 200  # requests kept for the live view

_HELP = {
    "spec_decode_num_drafts_total": "verification steps that carried a draft",
    "spec_decode_num_draft_tokens_total": "draft tokens proposed",
    "spec_decode_num_accepted_tokens_total": "draft tokens accepted",
    "spec_decode_num_accepted_tokens_per_pos_total": "draft tokens accepted at each draft position",
    "spec_decode_num_reached_per_pos_total": "drafts that reached each draft position",
    "spec_proxy_output_tokens_total": "tokens answered by speculative generation",
    "spec_proxy_requests_total": "requests by how they were served",
    "spec_proxy_forwarded_total": "requests forwarded upstream, by reason",
    "spec_proxy_tool_requests_total": "requests with tools or a tool history, by how they were served",
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class ProxyMetrics:
    def __init__(self) -> None:
        self.counters: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(lambda: defaultdict(float))
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT)

    def _add(self, name: str, value: float, **labels: str) -> None:
        self.counters[name][tuple(sorted(labels.items()))] += value

    def observe_answer(self, client: str, endpoint: str, stats: AnswerStats, tools: bool = False) -> None:
        labels = {"target": stats.target, "drafter": stats.drafter or "none"}
        self._add("spec_proxy_requests_total", 1, mode="speculative", endpoint=endpoint)
        if tools:
            self._add("spec_proxy_tool_requests_total", 1, mode="speculative", endpoint=endpoint)
        self._add("spec_proxy_output_tokens_total", stats.output_tokens, **labels)
        self._add("spec_decode_num_drafts_total", stats.drafts, **labels)
        self._add("spec_decode_num_draft_tokens_total", stats.drafted_tokens, **labels)
        self._add("spec_decode_num_accepted_tokens_total", stats.accepted_tokens, **labels)
        for position, (reached, accepted) in enumerate(zip(stats.position_reached, stats.position_accepted)):
            self._add("spec_decode_num_reached_per_pos_total", reached, position=str(position), **labels)
            self._add("spec_decode_num_accepted_tokens_per_pos_total", accepted, position=str(position), **labels)
        self.recent.appendleft({
            "time": time.time(), "client": client, "endpoint": endpoint, "model": stats.target,
            "mode": "speculative", "drafter": stats.drafter, "output_tokens": stats.output_tokens,
            "drafted_tokens": stats.drafted_tokens, "acceptance_rate": stats.acceptance_rate,
            "tokens_per_second": stats.tokens_per_second, "reason": "",
        })

    def observe_forward(self, client: str, endpoint: str, model: str, code: str, reason: str,
                        tools: bool = False) -> None:
        self._add("spec_proxy_requests_total", 1, mode="forwarded", endpoint=endpoint)
        if tools:
            self._add("spec_proxy_tool_requests_total", 1, mode="forwarded", endpoint=endpoint)
        self._add("spec_proxy_forwarded_total", 1, reason=code, endpoint=endpoint)
        self.recent.appendleft({"time": time.time(), "client": client, "endpoint": endpoint, "model": model,
                                "mode": "forwarded", "reason": reason})

    def prometheus(self) -> str:
        lines: list[str] = []
        for name in sorted(self.counters):
            lines += [f"# HELP {name} {_HELP.get(name, name)}", f"# TYPE {name} counter"]
            for labels, value in sorted(self.counters[name].items()):
                text = ",".join(f'{key}="{_escape(val)}"' for key, val in labels)
                lines.append(f"{name}{{{text}}} {value:g}")
        return "\n".join(lines) + "\n"
