"""Speed-ups, only against a measured standard baseline: the baseline per server and target, how it is
measured, and the line shown under each answer."""

from __future__ import annotations

from typing import Any

from config import Settings
from utils.app.runtime import run, server, store, when
from utils.app.store import ConversationStore
from utils.engine.drafters import NONE, model_free_drafters
from utils.engine.events import DoneEvent
from utils.engine.request import GenerationRequest
from utils.engine.served import answer_decoder
from utils.engine.stats import AnswerStats

BASELINE_PROMPT = "Write a short paragraph about the history of the bicycle."
BASELINE_MAX_TOKENS = 48
MIN_TOKENS_FOR_SPEEDUP = 8  # shorter answers are over before their speed means anything
MIN_DRAFTED_SHARE = 0.1  # below this share of drafted tokens, speculation hardly ran: no speed-up figure


def baseline_text(baseline: dict[str, Any] | None) -> str:
    if not baseline:
        return "no baseline measured yet"
    return (f"standard baseline {baseline['tokens_per_second']:.1f} tokens/s ({baseline['how']}, "
            f"{when(baseline['measured_at'])})")


def no_speedup_reason(stats: AnswerStats, so_far: bool = False) -> str | None:
    """Why a speculative answer gets no speed-up figure, or None when it can have one.

    A speed-up says what drafting did to the speed. An answer too short to time, or one where (almost)
    nothing was drafted, ran at standard speed plus noise: a figure there would credit or blame
    speculation for something it did not do, so the reason is shown instead. While the answer streams
    (`so_far`) it says only what has happened: a verdict on tokens not yet generated was contradicted
    by answers that drafted most of their text later on (issue 44)."""
    output, drafted = stats.output_tokens, stats.drafted_tokens
    if output < MIN_TOKENS_FOR_SPEEDUP:
        if so_far:
            return f"too few tokens yet ({output}) for a speed-up"
        return f"{output} tokens is too short an answer to measure a speed-up"
    if drafted >= MIN_DRAFTED_SHARE * output:
        return None
    if so_far:
        return f"drafted {drafted} of {output} tokens so far"
    return f"drafted {drafted} of {output} tokens: {_why_little_drafted(stats)}"


def _why_little_drafted(stats: AnswerStats) -> str:
    if stats.fallbacks:  # its reason is shown in full once, on its own line (show_fallbacks)
        return f"it went standard after {stats.fallbacks[-1].at_token} tokens (why: above)"
    standard = sum(1 for r in stats.rounds if not r.k)
    if stats.rounds and standard >= len(stats.rounds) / 2:
        return "the controller found drafting did not pay here and generated normally"
    if stats.drafter in model_free_drafters():
        return f"{stats.drafter} found little to propose (it drafts from text that repeats)"
    return "the draft proposed little that the target could check"


def speedup_text(stats: AnswerStats, baseline: dict[str, Any] | None) -> str:
    if stats.mode == "standard":
        if stats.done_reason == "stopped":
            return "standard answer, stopped (not used as the baseline)"
        return "standard answer (used as the baseline)"
    if reason := no_speedup_reason(stats):
        return f"no speed-up shown: {reason}"
    if not baseline:
        return "speed-up: no baseline measured yet"
    speedup = stats.tokens_per_second / baseline["tokens_per_second"]
    return f"speed-up ×{speedup:.2f} against {baseline_text(baseline)}"


def speedup_so_far(stats: AnswerStats, baseline: dict[str, Any] | None, rate: float | None) -> str:
    """The chart's headline for a speculative answer: "so far" only while it streams (no done_reason yet).
    A finished answer without a figure says only that: the reason is in full under the answer, once
    (speedup_text), not cut off in a chart title."""
    live = not stats.done_reason
    if reason := no_speedup_reason(stats, so_far=live):
        return f"no speed-up yet: {reason}" if live else "no speed-up figure (why: under the answer)"
    if baseline and rate:
        return (f"speed-up{' so far' if live else ''} ×{rate / baseline['tokens_per_second']:.2f} against the "
                "standard baseline")
    return "speed-up: no baseline measured yet"


def remember_baseline(conversations: ConversationStore, url: str, stats: AnswerStats, how: str) -> None:
    """A finished standard answer (not a stopped one) is the newest baseline for its server and target."""
    finished = stats.done_reason != "stopped"
    measured = stats.output_tokens > 1 and stats.tokens_per_second
    if finished and measured and stats.mode == "standard":
        what = f"{how}, {stats.output_tokens} tokens"
        conversations.set_baseline(url, stats.target, stats.tokens_per_second, what)


def measure_baseline(settings: Settings, url: str, target: str) -> dict[str, Any]:
    """A short greedy standard generation, timed like any answer; saved as the baseline."""
    client = server(settings, url)

    async def generate() -> AnswerStats:
        decoder = await answer_decoder(settings.engine, client, target, NONE)  # as the answers are made
        request = GenerationRequest(prompt=BASELINE_PROMPT, max_tokens=BASELINE_MAX_TOKENS)
        async for event in decoder.stream(request):
            if isinstance(event, DoneEvent):
                return event.stats
        raise RuntimeError("the decoder ended without a result")

    stats = run(generate)
    conversations = store(settings)
    remember_baseline(conversations, url, stats, "'Measure baseline': a standard answer to a fixed prompt")
    return conversations.baseline(url, target) or {}
