"""Token selection from one position's logits, with Ollama's options and order.

Shared by the embedded server (which samples from a whole vocabulary's logits) and the rejection-
sampling validator (which rebuilds a model's sampling distribution from its top log-probabilities):
both must agree exactly on what distribution a set of options makes.

The embedded server samples here rather than inside llama.cpp so that a request answered from a
shared, batched evaluation (the validator's nested prompts) picks its token exactly as it would
have alone: the choice depends only on that position's logits, the options and the request's seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

MIN_TEMPERATURE = 1e-6  # below this sampling is greedy (logits divided by less overflow to NaN)


@dataclass(frozen=True)
class SamplingOptions:
    # Ollama's defaults (api/types.go).
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.9
    min_p: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        problems = [
            message for bad, message in (
                (not self.temperature >= 0 or math.isinf(self.temperature), "temperature must be 0 or more"),
                (self.top_k < 0, "top_k must be 0 or more"),
                (not 0 <= self.top_p <= 1, "top_p must be between 0 and 1"),
                (not 0 <= self.min_p <= 1, "min_p must be between 0 and 1"),
            ) if bad
        ]
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def to_ollama(self) -> dict[str, Any]:
        """These options as an Ollama request's `options` (the seed only where one is set)."""
        options: dict[str, Any] = {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p,
                                   "min_p": self.min_p}
        if self.seed is not None:
            options["seed"] = self.seed
        return options


GREEDY = SamplingOptions(temperature=0.0)


def log_sum_exp(logits: np.ndarray) -> float:
    """log(sum(exp(logits))): subtracted from a logit, it gives that token's log-probability."""
    peak = float(np.max(logits))
    return peak + float(np.log(np.exp(logits - peak, dtype=np.float64).sum()))


def distribution(values: np.ndarray, options: SamplingOptions) -> tuple[np.ndarray, np.ndarray]:
    """(indices, probabilities) that sampling draws from: top-k, temperature, softmax, top-p, min-p.

    `values` are logits or log-probabilities (the same thing up to a constant). Indices come most
    likely first.
    """
    candidates = np.arange(values.shape[0])
    values = values.astype(np.float64)
    if 0 < options.top_k < values.shape[0]:
        keep = np.argpartition(-values, options.top_k - 1)[: options.top_k]
        candidates, values = candidates[keep], values[keep]
    order = np.argsort(-values, kind="stable")
    candidates, values = candidates[order], values[order]
    probs = np.exp((values - values[0]) / options.temperature)  # peak first: a tiny temperature cannot overflow
    probs /= probs.sum()
    if 0.0 < options.top_p < 1.0:
        cut = int(np.searchsorted(np.cumsum(probs), options.top_p)) + 1
        candidates, probs = candidates[:cut], probs[:cut]
    if options.min_p > 0.0:
        keep = probs >= options.min_p * probs[0]
        candidates, probs = candidates[keep], probs[keep]
    return candidates, probs / probs.sum()


def sample(logits: np.ndarray, options: SamplingOptions, rng: np.random.Generator) -> int:
    """Greedy at temperature 0; otherwise one draw from `distribution`."""
    if options.greedy:
        return int(np.argmax(logits))
    candidates, probs = distribution(logits, options)
    return int(candidates[rng.choice(probs.shape[0], p=probs)])


def text_distribution(top_logprobs: dict[str, float], options: SamplingOptions) -> dict[str, float]:
    """The sampling distribution over token texts, from a model's top log-probabilities.

    Exact only when the list holds at least `top_k` entries, which the caller guarantees.
    """
    texts = list(top_logprobs)
    if not texts:
        return {}
    if options.greedy:
        return {max(texts, key=top_logprobs.__getitem__): 1.0}
    indices, probs = distribution(np.array([top_logprobs[t] for t in texts]), options)
    out: dict[str, float] = {}
    for index, prob in zip(indices, probs):
        out[texts[index]] = out.get(texts[index], 0.0) + float(prob)
    return out


def best_tokens(logits: np.ndarray, count: int) -> list[int]:
    """The `count` most likely tokens, most likely first (ties: lower id first). A few argmax passes
    for a few tokens; otherwise one partition for the threshold (an argpartition of a whole
    vocabulary costs about 0.25 ms per 50,000 tokens)."""
    if count <= 8:
        values, best = logits.copy(), []
        for _ in range(min(count, values.shape[0])):
            token = int(np.argmax(values))
            best.append(token)
            values[token] = -np.inf
        return best
    size = logits.shape[0]
    if count >= size:
        return [int(t) for t in np.argsort(-logits, kind="stable")]
    threshold = np.partition(logits, size - count)[size - count]
    candidates = np.flatnonzero(logits >= threshold)
    return [int(t) for t in candidates[np.argsort(-logits[candidates], kind="stable")][:count]]
