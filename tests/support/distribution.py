"""The check of the sampling tests: outcomes drawn through speculation fit the distribution the target's
own sampler draws from (chi-squared goodness of fit at p = 0.001)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from utils.engine.client import OllamaClient
from utils.sampling import SamplingOptions, text_distribution

# The chi-squared distribution's 0.999 quantile for 1-9 degrees of freedom.
CHI2_CRITICAL_001 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32, 8: 26.12, 9: 27.88}


def assert_fits(seen: Counter, expected: Mapping[str, float], runs: int) -> None:
    """Nothing was drawn that the target cannot sample, and the counts fit `expected`; rare outcomes
    are pooled so that each expected count is at least 5 (and at least two cells are compared)."""
    assert sum(seen[t] for t in seen if t not in expected) == 0, (seen, expected)
    common = [t for t, p in expected.items() if p * runs >= 5]
    observed = [seen[t] for t in common] + [runs - sum(seen[t] for t in common)]
    wanted = [expected[t] * runs for t in common] + [runs * (1 - sum(expected[t] for t in common))]
    cells = [(o, e) for o, e in zip(observed, wanted) if e > 0.5]
    chi2 = sum((o - e) ** 2 / e for o, e in cells)
    assert len(cells) >= 2 and chi2 < CHI2_CRITICAL_001[len(cells) - 1], (chi2, seen, expected)


def sampled_first_tokens(url: str, path: str, body: dict[str, Any], runs: int, expected: Mapping[str, float],
                         text_of: Callable[[dict[str, Any]], str]) -> tuple[Counter, set[str], int]:
    """`runs` sampled answers to `body` at `path` (no seed: a seeded sampled answer is standard
    generation's to repeat): how often each first token began an answer's text (`text_of(reply)`), read as
    the longest token of `expected` it begins with (else the whole text, which no cell expects), and the
    verification methods and drafted tokens the answers report."""
    seen: Counter = Counter()
    methods: set[str] = set()
    drafts = 0
    with httpx.Client(timeout=300) as client:
        for _ in range(runs):
            reply = client.post(f"{url}{path}", json=body).json()
            methods.add(reply["speculative"]["method"])
            drafts += reply["speculative"]["draft_tokens"]
            text = text_of(reply)
            seen[max((token for token in expected if token and text.startswith(token)), key=len, default=text)] += 1
    return seen, methods, drafts


async def first_token_distribution(server_url: str, model: str, prompt: str,
                                   options: SamplingOptions) -> dict[str, float]:
    """The exact distribution of the target's first sampled token, from its top-20 log-probabilities."""
    server = OllamaClient(server_url)
    try:
        step = await server.next_token(model, prompt, {"temperature": 0, "num_ctx": 4096}, 20)
    finally:
        await server.aclose()
    return text_distribution(step.token.top, options)
