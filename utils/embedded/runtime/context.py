"""Prompts longer than the context (`num_ctx`): truncated as Ollama truncates them, never refused.

A chat drops its oldest turns first, keeping every system message and always the newest message
(Ollama's chatPrompt); what is kept begins at a user message. A prompt that still does not fit, or
a generate prompt, is cut by tokens on the model's worker: its first NUM_KEEP tokens and as many of
its last as fit (Ollama's runner, which leaves about half the context for the answer). Either way
the answer says what was left out, in a `truncated` field of its last message, and the server's
log has a line for it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from utils.embedded.runtime.jobs import Job

NUM_KEEP = 5  # Ollama's num_keep default (4) plus the beginning-of-sequence token

# This server does not shift the context during generation (Ollama does): a chat is fitted into
# the context less this share, so that its answer has room.
ANSWER_SHARE = 4  # num_ctx // ANSWER_SHARE tokens kept free for the answer


def log(message: str) -> None:
    print(f"[embedded] {message}", file=sys.stderr, flush=True)


def fit_messages(messages: list[dict[str, Any]], render: Callable[[list[dict[str, Any]]], str],
                 count: Callable[[str], int], num_ctx: int, truncate: bool = True) -> tuple[str, int]:
    """(the prompt, how many messages were left out) for a chat that must fit the context.
    `truncate` False (the request's): the whole chat, which the worker refuses if it is too long."""
    limit = num_ctx - num_ctx // ANSWER_SHARE
    prompt = render(messages)
    if not truncate or len(prompt.encode("utf-8", errors="surrogatepass")) < limit or count(prompt) <= limit:
        return prompt, 0  # a token is at least one byte: a short prompt needs no tokenizing
    # Where the kept turns may begin: at a user message (templates such as Gemma's refuse a chat
    # whose turns do not alternate from one, and a tool result without its call means nothing),
    # or at the last message, which is always kept.
    starts = [i for i in range(1, len(messages)) if messages[i].get("role") == "user"]
    starts = sorted(set(starts) | {len(messages) - 1})
    low, high = 0, len(starts) - 1  # the first start that fits, by bisection (more dropped, fewer tokens)
    best = None
    while low <= high:
        middle = (low + high) // 2
        candidate = _from(messages, starts[middle], render)
        if count(candidate) <= limit:
            best, high = (candidate, starts[middle]), middle - 1
        else:
            low = middle + 1
    prompt, start = best if best else (_from(messages, len(messages) - 1, render), len(messages) - 1)
    dropped = sum(1 for m in messages[:start] if m.get("role") != "system")
    if dropped:
        log(f"truncating input messages which exceed context length: left out {dropped} of {len(messages)}")
    return prompt, dropped


def _from(messages: list[dict[str, Any]], start: int, render: Callable[[list[dict[str, Any]]], str]) -> str:
    """The prompt of messages[start:], with the system messages before `start` kept."""
    return render([m for m in messages[:start] if m.get("role") == "system"] + messages[start:])


def fit_groups(groups: list[list[Job]], num_ctx: int) -> list[list[Job]]:
    """The worker's groups with every prompt inside the context: a nested group that reaches past
    it is run job by job, and a job past it is cut to its first NUM_KEEP tokens and its last ones
    (unless it asked not to be truncated: then the worker refuses it)."""
    fitted: list[list[Job]] = []
    for group in groups:
        if len(group[-1].tokens) < num_ctx:
            fitted.append(group)
            continue
        for job in group:
            if len(job.tokens) >= num_ctx and job.truncate:
                _cut(job, num_ctx)
            fitted.append([job])
    return fitted


def _cut(job: Job, num_ctx: int) -> None:
    keep = min(NUM_KEEP, num_ctx - 1)
    limit = num_ctx - max((num_ctx - keep) // 2, 1)  # Ollama's contextShiftPromptLimit
    before = len(job.tokens)
    job.tokens = [*job.tokens[:keep], *job.tokens[before - (limit - keep):]]
    job.truncated_tokens = before - len(job.tokens)
    job.reuse, job.walked = min(job.reuse, keep), min(job.walked, keep)
    log(f"truncating input prompt: limit {limit}, prompt {before}, keep {keep}, new {len(job.tokens)}")
