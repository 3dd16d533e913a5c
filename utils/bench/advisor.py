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
from utils.bench.first_asks import remembers_answers
from utils.burst import announce
from utils.engine.answer import collect
from utils.engine.client import OllamaClient, ServerError
from utils.engine.decoder import SpeculativeDecoder, build_decoder
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
# Loads each model before timing; none of the prompts, so a drafter that remembers answers has seen none.
WARM_UP = "Say hello."

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
    # Speed over standard generation's, one ratio per prompt and first-ask pass, each against the
    # standard answer to the same prompt measured next to it; the speed-up and the tokens/s above are
    # of these. A drafter that remembers answers has one first-ask pass: its later ones copy its earlier
    # answers, their ratios kept apart in `again_ratios`.
    ratios: list[float] = field(default_factory=list)
    again_ratios: list[float] = field(default_factory=list)

    def first_ask(self, repeat: int) -> bool:
        """Whether this drafter's answers of pass `repeat` (0 the first) are first asks: it has not
        answered those prompts before (suffix decoding has, from the second pass on)."""
        return repeat == 0 or not remembers_answers(self.drafter)

    def add_ratio(self, ratio: float, repeat: int) -> None:
        (self.ratios if self.first_ask(repeat) else self.again_ratios).append(ratio)

    @property
    def speedup(self) -> float | None:
        return statistics.median(self.ratios) if self.ratios else None

    @property
    def spread(self) -> tuple[float, float] | None:
        """The 25th and 75th percentiles of the ratios (None for fewer than two)."""
        if len(self.ratios) < 2:
            return None
        quartiles = statistics.quantiles(self.ratios, n=4, method="inclusive")
        return quartiles[0], quartiles[2]

    @property
    def beyond_noise(self) -> bool:
        """Faster in at least three quarters of the runs: the median is not a lucky draw."""
        return self.spread is not None and self.spread[0] > 1.0


@dataclass
class Advice:
    target: str
    standard: Measurement
    candidates: list[Measurement] = field(default_factory=list)
    recommended: str = NONE
    reason: str = ""
    repeats: int = 1


@dataclass
class _Contender:
    measurement: Measurement
    decoder: SpeculativeDecoder
    answers: list[AnswerStats] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # of the first repeat


async def _contender(settings: Settings, server: OllamaClient, target: str, drafter: str) -> _Contender:
    """A decoder for (target, drafter), warmed up: loading a model is not generation time."""
    decoder = await build_decoder(settings.engine, server, target, drafter)
    await collect(decoder, GenerationRequest(prompt=WARM_UP, max_tokens=4))
    return _Contender(Measurement(drafter), decoder)


async def advise(settings: Settings, server: OllamaClient, target: str, drafters: list[str], *,
                 prompts: tuple[str, ...] = ADVISOR_PROMPTS, max_tokens: int = ADVISOR_MAX_TOKENS,
                 repeats: int = 2, progress: Progress | None = None) -> Advice:
    """Measure standard generation and each drafter, interleaved: every prompt is answered by all of
    them in turn (the order reversed on every other pass, so none is always first), `repeats` times.
    Recommend the draft with the best median speed-up if it drafted and was faster beyond noise."""
    report = progress or (lambda done, total, label: None)
    report(0, 1, f"loading {target}")
    try:
        standard = await _contender(settings, server, target, NONE)
    except (ServerError, GenerationError) as error:
        return Advice(target, Measurement(NONE, "standard", error=error.message),
                      reason=f"standard generation failed: {error.message}")
    standard.measurement.relation = "standard"
    advice = Advice(target, standard.measurement, repeats=repeats)
    contenders = [standard]
    for drafter in drafters:
        measurement = Measurement(drafter)
        try:
            kind = drafter_class(drafter).kind
            measurement.relation = kind or await tokenizer_relation(server, target, server, drafter)
            if measurement.relation == "unusable":
                measurement.error = f"{drafter} cannot draft for {target}"
            else:
                contender = await _contender(settings, server, target, drafter)
                contender.measurement.relation = measurement.relation
                measurement = contender.measurement
                contenders.append(contender)
        except (ServerError, GenerationError) as error:
            measurement.error = error.message
        advice.candidates.append(measurement)
    total, done = repeats * len(prompts) * len(contenders), 0
    for repeat in range(repeats):
        for index, prompt in enumerate(prompts):
            order = contenders if (repeat + index) % 2 == 0 else contenders[::-1]
            speeds: dict[str, float] = {}
            for contender in order:
                report(done, total, f"pass {repeat + 1} of {repeats}, prompt {index + 1} of {len(prompts)}: "
                                    f"{contender.measurement.drafter}")
                done += 1
                try:
                    answer = await collect(contender.decoder, GenerationRequest(prompt=prompt, max_tokens=max_tokens))
                except (ServerError, GenerationError) as error:
                    contender.measurement.error = error.message
                    continue
                stats = AnswerStats.model_validate(answer["stats"])
                if contender.measurement.first_ask(repeat):  # a copied answer's speed is not the drafter's
                    contender.answers.append(stats)
                speeds[contender.measurement.drafter] = stats.tokens_per_second
                if repeat == 0:
                    contender.texts.append(answer["text"])
            for contender in contenders[1:]:
                mine, base = speeds.get(contender.measurement.drafter), speeds.get(NONE)
                if mine and base:
                    contender.measurement.add_ratio(mine / base, repeat)
    report(total, total, "done")
    for contender in contenders:
        _summarise(contender, standard.texts)
    advice.recommended, advice.reason = _recommend(advice.standard, advice.candidates)
    return advice


def _summarise(contender: _Contender, standard_texts: list[str]) -> None:
    result = contender.measurement
    if result.error or not contender.answers:
        return
    total = merge(contender.answers)
    result.output_tokens, result.tokens_per_second = total.output_tokens, total.tokens_per_second
    result.drafted_tokens = total.drafted_tokens
    if total.drafted_tokens:
        result.acceptance_rate = total.acceptance_rate
        result.mean_acceptance_length = total.mean_acceptance_length
    if result.relation != "standard":
        result.identical = contender.texts == standard_texts


def _recommend(standard: Measurement, candidates: list[Measurement]) -> tuple[str, str]:
    # A candidate that drafted nothing ran standard generation: its speed says nothing about drafting.
    faster = [c for c in candidates if not c.error and c.drafted_tokens and (c.speedup or 0) > 1.0]
    if not faster:
        return NONE, (f"no draft beat standard generation ({standard.tokens_per_second:.1f} tokens/s) on these "
                      "prompts: keep speculation off for this target")
    best = max(faster, key=lambda c: c.speedup or 0)
    summary = (f"{best.drafter}: median ×{best.speedup:.2f} of standard generation's speed "
               f"({best.tokens_per_second:.1f} against {standard.tokens_per_second:.1f} tokens/s)")
    if remembers_answers(best.drafter):  # its later passes copied its first answers: left out
        summary += ", first asks only"
    spread = best.spread
    if spread is None or not best.beyond_noise:  # beyond noise needs a spread: two runs at least
        shown = f"×{spread[0]:.2f} – ×{spread[1]:.2f}" if spread else "one run only"
        return NONE, (f"{summary}, but within noise ({shown} over {len(best.ratios)} runs): keep speculation "
                      "off for this target, or measure with more prompts or repeats")
    return best.drafter, f"{summary}, ×{spread[0]:.2f} – ×{spread[1]:.2f} over {len(best.ratios)} runs"


# -- does the server run verification requests in parallel? ---------------------------------------


@dataclass
class ParallelCheck:
    parallel: bool
    width: int  # requests per verification, K + 1
    sequential_seconds: float  # the `width` requests one after another
    concurrent_seconds: float  # the same kind of requests all at once, as the validator sends them


async def check_parallel(settings: Settings, server: OllamaClient, model: str, width: int = 4,
                         rounds: int = 3) -> ParallelCheck:
    """Send `width` one-token requests whose prompts extend one another (one verification of
    K = width - 1) one after another, then another such set all at once; median of `rounds`. A server
    that runs them in parallel answers the set in much less time than the sequence; one that queues
    them (Ollama with OLLAMA_NUM_PARALLEL=1) takes about as long. A timing, so noisy on a busy machine."""
    options = {**settings.engine.context_options(), "temperature": 0}
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
