"""Speed-ups, only against a measured standard baseline: the baseline per server and target, how it is
measured, and the line shown under each answer."""

from __future__ import annotations

from typing import Any

from config import Settings
from utils.app.runtime import run, server, store, when
from utils.app.store import ConversationStore
from utils.engine.decoder import build_decoder
from utils.engine.drafters import NONE
from utils.engine.events import DoneEvent
from utils.engine.request import GenerationRequest

BASELINE_PROMPT = "Write a short paragraph about the history of the bicycle."
BASELINE_MAX_TOKENS = 48


def baseline_text(baseline: dict[str, Any] | None) -> str:
    if not baseline:
        return "no baseline measured yet"
    return (f"standard baseline {baseline['tokens_per_second']:.1f} tokens/s ({baseline['how']}, "
            f"{when(baseline['measured_at'])})")


def speedup_text(stats: dict[str, Any], baseline: dict[str, Any] | None) -> str:
    if stats.get("mode") == "standard":
        return "standard answer (used as the baseline)"
    if not baseline:
        return "speed-up: no baseline measured yet"
    speedup = stats["tokens_per_second"] / baseline["tokens_per_second"]
    return f"speed-up ×{speedup:.2f} against {baseline_text(baseline)}"


def speedup_so_far(stats: dict[str, Any], baseline: dict[str, Any] | None, rate: float | None) -> str:
    """The live chart's headline for a speculative answer."""
    if baseline and rate:
        return f"speed-up so far ×{rate / baseline['tokens_per_second']:.2f} against the standard baseline"
    return "speed-up: no baseline measured yet"


def remember_baseline(conversations: ConversationStore, url: str, stats: dict[str, Any], how: str) -> None:
    """A finished standard answer is the newest baseline for its server and target."""
    if stats.get("mode") == "standard" and stats.get("output_tokens", 0) > 1 and stats.get("tokens_per_second"):
        what = f"{how}, {stats['output_tokens']} tokens"
        conversations.set_baseline(url, stats["target"], stats["tokens_per_second"], what)


def measure_baseline(settings: Settings, url: str, target: str) -> dict[str, Any]:
    """A short greedy standard generation, timed like any answer; saved as the baseline."""
    client = server(settings, url)

    async def generate() -> dict[str, Any]:
        decoder = await build_decoder(settings.engine, client, target, NONE)
        request = GenerationRequest(prompt=BASELINE_PROMPT, max_tokens=BASELINE_MAX_TOKENS)
        async for event in decoder.stream(request):
            if isinstance(event, DoneEvent):
                return event.stats.model_dump()
        raise RuntimeError("the decoder ended without a result")

    stats = run(generate)
    conversations = store(settings)
    remember_baseline(conversations, url, stats, "'Measure baseline': a standard answer to a fixed prompt")
    return conversations.baseline(url, target) or {}
