"""What a request is to a model's worker: a Job, the tokens it makes and how it ends.

Also the count of generation requests still being read (ARRIVALS), which the HTTP layer keeps and
the workers read to gather a validator's burst.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from utils.errors import SpecError
from utils.sampling import SamplingOptions, best_tokens, log_sum_exp


class Arrivals:
    """Generation requests the server has begun to read but not yet handed to a model.

    The HTTP layer counts them (`arrive` when a request comes in, `settle` once its job is submitted
    or it ends otherwise); a worker holding a one-token job waits while any are in flight, since
    they may be the rest of its validator burst. Written by the event loop, read by the workers.
    """

    def __init__(self) -> None:
        self.in_flight = 0
        self.last = 0.0  # time.monotonic() of the latest arrival

    def arrive(self) -> None:
        self.in_flight += 1
        self.last = time.monotonic()

    def settle(self) -> None:
        self.in_flight -= 1


ARRIVALS = Arrivals()


class RunnerError(SpecError):
    """A request the model runner cannot serve; `status` is the HTTP status Ollama uses for it."""

    status: int  # always given (SpecError's may be None)

    def __init__(self, message: str, status: int = 500):
        super().__init__(message, status)


@dataclass
class TokenInfo:
    token: int
    piece: bytes
    logprob: float | None = None
    top: list[tuple[int, bytes, float]] | None = None


def token_info(pieces: list[bytes], token: int, logits: np.ndarray, top_logprobs: int | None) -> TokenInfo:
    """The token's piece; its log-probability and the `top_logprobs` best only when asked."""
    if top_logprobs is None:
        return TokenInfo(token, pieces[token])
    normalizer = log_sum_exp(logits)
    top: list[tuple[int, bytes, float]] = []
    if top_logprobs > 0:
        top = [(t, pieces[t], float(logits[t]) - normalizer) for t in best_tokens(logits, top_logprobs)]
    return TokenInfo(token, pieces[token], float(logits[token]) - normalizer, top)


@dataclass
class Completion:
    """The end of one request: why it stopped and Ollama's counters (durations in nanoseconds)."""

    done_reason: str
    prompt_eval_count: int
    prompt_eval_duration: int
    eval_count: int
    eval_duration: int


@dataclass
class Job:
    """One generation request. `on_token` and `on_done` are called from the worker thread."""

    prompt: bytes
    options: SamplingOptions
    num_predict: int
    top_logprobs: int | None  # None: no logprobs
    on_token: Callable[[TokenInfo], None]
    on_done: Callable[[Completion | RunnerError], None]
    cancelled: threading.Event = field(default_factory=threading.Event)
    tokens: Sequence[int] = field(default_factory=list)  # a nested group's: Prefix (cache.py)
    reuse: int = 0  # leading tokens known to equal the cache as it was at `version`
    version: int = -1
    submitted: int = 0  # time.perf_counter_ns() when it was handed to the worker
    walked: int = 0  # leading tokens that TokenCache.tokenize gave (the rest: a nested prompt's extra text)
    burst: tuple[str, int] | None = None  # (id, size) of the validator burst it announced (utils/burst.py)
    constraint: Any = None  # a grammar.GrammarConstraint (`format`): what the answer may be; freed when done
    truncate: bool = True  # a prompt past the context is cut (context.py); False: refused
    truncated_tokens: int = 0  # prompt tokens left out to fit the context
