"""Prompts longer than the context (`num_ctx`), cut by tokens on the model's worker as Ollama's runner
cuts them, never refused (unless the request asked not to be truncated).

A prompt past the context keeps its first NUM_KEEP tokens and as many of its last as fit, leaving
about half the context for the answer. A chat has already dropped its oldest turns to fit
(http/chat_prompt.py); what still does not fit, and a generate prompt, is cut here. The answer says
how many tokens were left out (`Job.truncated_tokens`), and the server's log has a line for it.
"""

from __future__ import annotations

import sys

from utils.embedded.runtime.jobs import Job

NUM_KEEP = 5  # Ollama's num_keep default (4) plus the beginning-of-sequence token


def log(message: str) -> None:
    print(f"[embedded] {message}", file=sys.stderr, flush=True)


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


LONG_PROMPT = 1024  # tokens: a prompt this long gets a log line saying how much of it was read
FEW_TOKENS = 16  # new tokens a validator burst or a draft round reads: no log line for them


class Abandoned(Exception):
    """The clients of a prompt left while it was read: the worker stops at the next batch."""

    def __init__(self, read: int, total: int):
        super().__init__(f"abandoned after {read} of {total} new tokens")
        log(f"prompt abandoned by its client: stopped after reading {read} of {total} new tokens")


def log_prompt(tokens: int, cached: int) -> None:
    """A long prompt's line in the server log: how much of it the cache held and how much is read."""
    if tokens >= LONG_PROMPT and tokens - cached > FEW_TOKENS:
        log(f"prompt of {tokens} tokens: {cached} cached, {tokens - cached} to read")
