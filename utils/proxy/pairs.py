"""Which drafter speculates for which target: `--pair TARGET=DRAFTER`, or a default from upstream's models."""

from __future__ import annotations

from utils.engine.client import OllamaClient
from utils.engine.drafters.lookup import LOOKUP
from utils.engine.drafters.suffix import SUFFIX
from utils.errors import SpecError


class PairError(SpecError, ValueError):
    """A `--pair TARGET=DRAFTER` (or SPEC_PAIRS entry) that cannot be read."""


def parse_pairs(items: list[str]) -> dict[str, str]:
    """`["qwen2.5-coder:1.5b=qwen2.5-coder:0.5b", "llama3=lookup"]` -> {target: drafter}."""
    pairs: dict[str, str] = {}
    for item in items:
        target, sep, drafter = item.strip().partition("=")
        if not sep or not target.strip() or not drafter.strip():
            raise PairError(f"a pair is TARGET=DRAFTER (a draft model, '{LOOKUP}' or '{SUFFIX}'), not {item!r}")
        pairs[target.strip()] = drafter.strip()
    return pairs


def model_free_pairs(models: list[str]) -> dict[str, str]:
    """Suffix decoding for each of `models`: it needs no model, and learns from every answer."""
    return {model: SUFFIX for model in models}


async def default_pairs(upstream: OllamaClient, target: str, draft: str,
                        draft_host: str | None = None) -> dict[str, str]:
    """Suffix decoding (it needs no model, and learns from every answer the proxy gives) for every
    model upstream has; the configured draft model for the configured target where the draft is there
    too (or on its own draft host). Suffix, not prompt lookup: on conversations it measured 1.04x and
    1.10x on turns 3 and 4 against lookup's 1.00x and 0.97x, and both 0.97-1.01x on single prompts
    (docs/performance.md)."""
    models = await upstream.models()
    pairs = model_free_pairs(models)
    if target in pairs and (draft in models or draft_host):
        pairs[target] = draft
    return pairs
