"""Token selection from one position's logits, with Ollama's options and order.

The embedded server samples here rather than inside llama.cpp so that a request answered from a
shared, batched evaluation (the validator's nested prompts) picks its token exactly as it would
have alone: the choice depends only on that position's logits, the options and the request's seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingOptions:
    # Ollama's defaults (api/types.go).
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.9
    min_p: float = 0.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float64) - float(np.max(logits))
    return shifted - np.log(np.exp(shifted).sum())


def sample(logits: np.ndarray, options: SamplingOptions, rng: np.random.Generator) -> int:
    """Greedy at temperature 0; otherwise top-k, temperature, softmax, top-p, min-p, then a draw."""
    if options.greedy:
        return int(np.argmax(logits))
    candidates = np.arange(logits.shape[0])
    values = logits.astype(np.float64)
    if 0 < options.top_k < values.shape[0]:
        keep = np.argpartition(-values, options.top_k - 1)[: options.top_k]
        candidates, values = candidates[keep], values[keep]
    order = np.argsort(-values, kind="stable")
    candidates, values = candidates[order], values[order] / options.temperature
    probs = np.exp(values - values[0])
    probs /= probs.sum()
    if 0.0 < options.top_p < 1.0:
        cut = int(np.searchsorted(np.cumsum(probs), options.top_p)) + 1
        candidates, probs = candidates[:cut], probs[:cut]
    if options.min_p > 0.0:
        keep = probs >= options.min_p * probs[0]
        candidates, probs = candidates[keep], probs[keep]
    probs = probs / probs.sum()
    return int(candidates[rng.choice(probs.shape[0], p=probs)])
