"""Speed-ups, only against a measured standard baseline: the baseline per server and target, how it is
measured, and the line shown under each answer."""

from __future__ import annotations

from datetime import datetime
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
# A baseline is like-for-like for an answer measured on the same server and target (the store keys it so),
# at most this long before it (the machine's load changes)...
BASELINE_MAX_AGE_S = 3600.0
# ...and at a comparable context length: a token costs more the longer the context. Within this many
# tokens, or this share of the baseline's context, the rate hardly differs on the small models here.
CONTEXT_SLACK_TOKENS, CONTEXT_SLACK_SHARE = 512, 0.5


def context_tokens(stats: AnswerStats) -> int:
    """The context an answer's tokens were generated at, on average: its prompt and half its output."""
    return stats.prompt_tokens + stats.output_tokens // 2


def baseline_text(baseline: dict[str, Any] | None) -> str:
    if not baseline:
        return "no baseline measured yet"
    context = f", at {baseline['context_tokens']} tokens of context" if baseline.get("context_tokens") else ""
    return (f"standard baseline {baseline['tokens_per_second']:.1f} tokens/s ({baseline['how']}{context}, "
            f"{when(baseline['measured_at'])})")


def unlike_baseline(stats: AnswerStats, baseline: dict[str, Any], at: str | None = None) -> str | None:
    """Why `baseline` is not a like-for-like standard rate for an answer (made at `at`, an ISO time, when
    known), or None where it is: taken at a comparable context length, and not long before."""
    base = baseline.get("context_tokens")
    if base is None:
        return "its context length was not kept (measured by an older version): measure it again"
    mine = context_tokens(stats)
    if abs(mine - base) > max(CONTEXT_SLACK_TOKENS, CONTEXT_SLACK_SHARE * base):
        return (f"it was measured at {base} tokens of context and this answer ran at about {mine}: a token costs "
                "more the longer the context")
    if at is not None:
        try:
            age = (datetime.fromisoformat(at) - datetime.fromisoformat(baseline["measured_at"])).total_seconds()
        except (KeyError, ValueError):
            age = 0.0
        if age > BASELINE_MAX_AGE_S:
            return f"it was measured {age / 3600:.1f} hours before this answer: the machine's load may have changed"
    return None


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


def speedup_text(stats: AnswerStats, baseline: dict[str, Any] | None, at: str | None = None,
                 asked_again: bool = False) -> str:
    """The line under a Chat answer: what its speed-up compares, or why it has none. `at`: when the answer
    was made; `asked_again`: its drafter had already answered the same question (a copy, not news)."""
    if stats.mode == "standard":
        if stats.done_reason == "stopped":
            return "standard answer, stopped (not used as the baseline)"
        return "standard answer (used as the baseline)"
    if reason := no_speedup_reason(stats):
        return f"no speed-up shown: {reason}"
    if not baseline:
        return "speed-up: no baseline measured yet"
    if unlike := unlike_baseline(stats, baseline, at):
        return (f"no speed-up shown: the standard baseline is not like-for-like ({unlike}); answer once with "
                "speculation off, or measure the baseline again")
    speedup = stats.tokens_per_second / baseline["tokens_per_second"]
    what = ("asked again: the drafter had already answered this question and copies it, not the speed of a new "
            "one" if asked_again else "this answer's tokens/s")
    return (f"speed-up ×{speedup:.2f} ({what}) against the {baseline_text(baseline)}: standard generation on "
            f"this server at a comparable context length (this answer: about {context_tokens(stats)} tokens)")


def speedup_so_far(stats: AnswerStats, baseline: dict[str, Any] | None, rate: float | None,
                   asked_again: bool = False) -> str:
    """The chart's headline for a speculative answer: "so far" only while it streams (no done_reason yet).
    A finished answer without a figure says only that: the reason is in full under the answer, once
    (speedup_text), not cut off in a chart title. A repeat's figure says so (`asked_again`)."""
    live = not stats.done_reason
    if reason := no_speedup_reason(stats, so_far=live):
        return f"no speed-up yet: {reason}" if live else "no speed-up figure (why: under the answer)"
    if baseline and unlike_baseline(stats, baseline) and not live:
        return "no speed-up figure: the baseline is not like-for-like (why: under the answer)"
    if baseline and rate:
        again = " (asked again: a copy)" if asked_again else ""
        return (f"speed-up{' so far' if live else ''} ×{rate / baseline['tokens_per_second']:.2f}{again} against "
                "the standard baseline")
    return "speed-up: no baseline measured yet"


def remember_baseline(conversations: ConversationStore, url: str, stats: AnswerStats, how: str) -> None:
    """A finished standard answer (not a stopped one) in Chat, or 'Measure baseline''s, is the newest
    baseline for its server and target, with the context length it ran at. Only these two: Compare's
    standard run answers another prompt, often read from the server's cache, and does not replace it."""
    finished = stats.done_reason != "stopped"
    measured = stats.output_tokens > 1 and stats.tokens_per_second
    if finished and measured and stats.mode == "standard":
        what = f"{how}, {stats.output_tokens} tokens"
        conversations.set_baseline(url, stats.target, stats.tokens_per_second, what, context_tokens(stats))


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
