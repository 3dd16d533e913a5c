"""Measurements that tell a user what to pick: which draft pays for a target, and whether the server
verifies draft positions in parallel.

Both measure instead of guessing: acceptance and speed depend on the pair, the prompts, the
hardware and the server's settings, none of which can be read from the model names.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from config import Settings
from utils.burst import announce
from utils.engine.answer import collect
from utils.engine.client import OllamaServer, ServerError
from utils.engine.decoder import build_decoder
from utils.engine.drafters import NONE, drafter_class
from utils.engine.events import GenerationError
from utils.engine.request import GenerationRequest
from utils.engine.stats import AnswerStats, merge
from utils.engine.tokenizers import tokenizer_relation

# Short, everyday prompts of the kinds people ask: code, explanation, a list.
ADVISOR_PROMPTS = (
    "Write a Python function that returns the n-th Fibonacci number.",
    "Explain in two sentences what a hash table is.",
    "List three common uses of the grep command.",
)
ADVISOR_MAX_TOKENS = 48

Progress = Callable[[int, int, str], None]


@dataclass
class Measurement:
    drafter: str  # "none" for standard generation
    relation: str = ""  # "same" | "cross" | "lookup" | "standard" | "unusable"
    tokens_per_second: float = 0.0
    output_tokens: int = 0
    drafted_tokens: int = 0
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    identical: bool | None = None  # every text equal to standard greedy's (it should be)
    error: str | None = None


@dataclass
class Advice:
    target: str
    standard: Measurement
    candidates: list[Measurement] = field(default_factory=list)
    recommended: str = NONE
    reason: str = ""


async def measure(settings: Settings, server: OllamaServer, target: str, drafter: str,
                  prompts: tuple[str, ...], max_tokens: int) -> tuple[Measurement, list[str]]:
    """Tokens/s and acceptance of one (target, drafter) pair over `prompts`, greedy, after a warm-up."""
    result = Measurement(drafter)
    try:
        decoder = await build_decoder(settings.engine, server, target, drafter)
        # Warm-up: loads the models, so that loading is not counted as generation time.
        await collect(decoder, GenerationRequest(prompt=prompts[0], max_tokens=4))
        texts, answers = [], []
        for prompt in prompts:
            answer = await collect(decoder, GenerationRequest(prompt=prompt, max_tokens=max_tokens))
            texts.append(answer["text"])
            answers.append(AnswerStats.model_validate(answer["stats"]))
    except (ServerError, GenerationError) as error:
        result.error = error.message
        return result, []
    total = merge(answers)
    result.output_tokens, result.tokens_per_second = total.output_tokens, total.tokens_per_second
    result.drafted_tokens = total.drafted_tokens
    if total.drafted_tokens:
        result.acceptance_rate = total.acceptance_rate
        result.mean_acceptance_length = total.mean_acceptance_length
    return result, texts


async def advise(settings: Settings, server: OllamaServer, target: str, drafters: list[str], *,
                 prompts: tuple[str, ...] = ADVISOR_PROMPTS, max_tokens: int = ADVISOR_MAX_TOKENS,
                 progress: Progress | None = None) -> Advice:
    """Measure standard generation and each drafter; recommend the fastest drafter that beats
    standard, else "none"."""
    total = len(drafters) + 1
    report = progress or (lambda done, total, label: None)
    report(0, total, f"standard generation of {target}")
    standard, standard_texts = await measure(settings, server, target, NONE, prompts, max_tokens)
    standard.relation = "standard"
    if standard.error:
        return Advice(target, standard, reason=f"standard generation failed: {standard.error}")
    advice = Advice(target, standard)
    for done, drafter in enumerate(drafters, start=1):
        report(done, total, f"drafting with {drafter}")
        kind = drafter_class(drafter).kind
        relation = kind or ""
        if kind is None:  # a draft model: does it share the target's tokenizer?
            try:
                relation = await tokenizer_relation(server, target, server, drafter)
            except ServerError as error:
                advice.candidates.append(Measurement(drafter, "unusable", error=error.message))
                continue
        if relation == "unusable":
            advice.candidates.append(Measurement(drafter, relation, error=f"{drafter} cannot draft for {target}"))
            continue
        candidate, texts = await measure(settings, server, target, drafter, prompts, max_tokens)
        candidate.relation = relation
        if not candidate.error:
            candidate.identical = texts == standard_texts
        advice.candidates.append(candidate)
    report(total, total, "done")
    advice.recommended, advice.reason = _recommend(standard, advice.candidates)
    return advice


def _recommend(standard: Measurement, candidates: list[Measurement]) -> tuple[str, str]:
    # A candidate that drafted nothing ran standard generation: its speed says nothing about drafting.
    faster = [c for c in candidates
              if not c.error and c.drafted_tokens and c.tokens_per_second > standard.tokens_per_second]
    if not faster:
        return NONE, (f"no draft beat standard generation ({standard.tokens_per_second:.1f} tokens/s) on these "
                      "prompts: keep speculation off for this target")
    best = max(faster, key=lambda c: c.tokens_per_second)
    return best.drafter, (f"{best.drafter}: {best.tokens_per_second:.1f} tokens/s against "
                          f"{standard.tokens_per_second:.1f} standard "
                          f"(×{best.tokens_per_second / standard.tokens_per_second:.2f})")


# -- does the server run verification requests in parallel? ---------------------------------------


@dataclass
class ParallelCheck:
    parallel: bool
    width: int  # requests per verification, K + 1
    sequential_seconds: float  # the `width` requests one after another
    concurrent_seconds: float  # the same kind of requests all at once, as the validator sends them


async def check_parallel(settings: Settings, server: OllamaServer, model: str, width: int = 4,
                         rounds: int = 3) -> ParallelCheck:
    """Send `width` one-token requests whose prompts extend one another (one verification of
    K = width - 1) one after another, then another such set all at once; median of `rounds`. A server
    that runs them in parallel answers the set in much less time than the sequence; one that queues
    them (Ollama with OLLAMA_NUM_PARALLEL=1) takes about as long. A timing, so noisy on a busy machine."""
    options = {"num_ctx": settings.engine.num_ctx, "temperature": 0}
    words = "the quick brown fox jumps over the lazy dog again and again".split()

    def verification(tag: str) -> list[str]:
        # A prefix of its own per set, so no set reuses what the server cached for another.
        base = f"{tag}. Copy this sentence: {' '.join(words)}\n"
        return [base + " ".join(words[:i]) for i in range(width)]

    async def one_by_one(prompts: list[str]) -> None:
        for prompt in prompts:
            await server.next_token(model, prompt, options)

    async def all_at_once(prompts: list[str]) -> None:
        burst = announce(len(prompts))  # as the validator does
        await asyncio.gather(*(server.next_token(model, prompt, options, 0, burst) for prompt in prompts))

    await server.next_token(model, "Hello", options)  # loads the model
    sequential, concurrent = [], []
    for round_number in range(rounds):
        started = time.perf_counter()
        await one_by_one(verification(f"Set {round_number}a"))
        sequential.append(time.perf_counter() - started)
        started = time.perf_counter()
        await all_at_once(verification(f"Set {round_number}b"))
        concurrent.append(time.perf_counter() - started)
    sequential_s, concurrent_s = statistics.median(sequential), statistics.median(concurrent)
    return ParallelCheck(concurrent_s < 0.6 * sequential_s, width, sequential_s, concurrent_s)
