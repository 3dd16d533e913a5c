"""bench-overhead's measurements (overhead.py): a speculative round's requests, timed against the
engine time their server reports, interleaved round by round.

Every request goes through the engine's own interface to a server (utils/engine/target.py's
`Target`), so that what is measured outside the engine is what the engine pays: over HTTP
`OllamaClient` (its keep-alive session and JSON codec; a burst in one request to a server with the
burst endpoint, else K+1 announced requests), in process the embedded server's `InProcessTarget`
(no HTTP, no JSON, runner jobs). The engine time of an answer is the one its server reports with it
(`Step.engine_s`, `Chunk.engine_s`: Ollama's `total_duration`, in process the runner's clock); that
of a burst, the largest among its answers (answers evaluated together report the same evaluation;
a burst the server had to split pays the others as time outside, and the number of evaluations is
kept with the sample).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from utils.burst import announce
from utils.engine.config import EngineConfig
from utils.engine.drafters import Drafter, DraftSetup, build_drafter, model_free_drafters
from utils.engine.target import Step, Target
from utils.sampling import GREEDY

KS = (2, 4, 8)
STANDARD_TOKENS = 16
ONE_TOKEN_STEPS = 4  # one-token requests in a row, each prompt extending the one before by its answer
DRAFT_TOP_K = 5  # the engine's default draft_top_k


@dataclass
class Sample:
    wall_ms: float
    engine_ms: float
    evaluations: int = 1  # of a burst: how many separate evaluations its answers report

    @property
    def outside_ms(self) -> float:
        return self.wall_ms - self.engine_ms


@dataclass
class Row:
    label: str
    samples: list[Sample] = field(default_factory=list)

    def median(self) -> Sample:
        return Sample(statistics.median(s.wall_ms for s in self.samples),
                      statistics.median(s.engine_ms for s in self.samples))

    def outside(self) -> float:
        """The median of each sample's wall time minus its own engine time. (The difference of the two
        medians mixes samples: a decode's time varies by a millisecond from round to round, more than
        the 0.3 ms outside it that this measures, so with a few rounds that difference is mostly noise.)"""
        return statistics.median(s.outside_ms for s in self.samples)


def engine_ms(seconds: float | None) -> float:
    """A server's reported engine time in milliseconds; a server that reports none cannot be measured."""
    if seconds is None:
        raise RuntimeError("the server reported no engine time (Ollama's total_duration) with its answer")
    return seconds * 1000


def context_text(tokens_wanted: int, chars_per_token: float) -> str:
    """Python source of about `tokens_wanted` tokens; raw code goes on without an end of text."""
    blocks, size, i = [], 0, 0
    header = '"""Inventory helpers."""\n\nfrom dataclasses import dataclass\n\n\n'
    size = len(header)
    while size < tokens_wanted * chars_per_token:
        block = (
            f"def price_of_item_{i}(quantity: int, discount: float = 0.{i % 9 + 1}) -> float:\n"
            f'    """Total price of {i + 3} units of item {i}, after the discount."""\n'
            f"    unit = {i * 7 % 97 + 1}.{i % 10}5\n"
            f"    return round(quantity * unit * (1 - discount), 2)\n\n\n"
        )
        blocks.append(block)
        size += len(block)
    return header + "".join(blocks) + "class Inventory:\n    def __init__(self):\n"


class Bench:
    """A round's requests to `server` as the engine makes them: greedy, raw, with the context size
    `num_ctx`. `way` names a path other than HTTP (in process) in the report."""

    def __init__(self, server: Target, target: str, draft: str, way: str = ""):
        self.server, self.target, self.draft, self.way = server, target, draft, way
        self.num_ctx = 4096

    def options(self, num_predict: int | None = None) -> dict[str, Any]:
        """Without `num_predict` for one-token requests, which the target sets to 1 itself."""
        options: dict[str, Any] = {"temperature": 0, "num_ctx": self.num_ctx}
        return options if num_predict is None else {**options, "num_predict": num_predict}

    async def one(self, model: str, prompt: str, burst: dict[str, str] | None = None) -> Step:
        return await self.server.next_token(model, prompt, self.options(), 0, burst)

    async def stream(self, model: str, prompt: str, num_predict: int, top: int) -> tuple[list[str], int, float]:
        """A raw streamed generation: the text of each chunk before the closing one, how many tokens,
        and the engine milliseconds the closing chunk reports."""
        pieces, count = [], 0
        engine: float | None = None
        async for chunk in self.server.stream_raw(model, prompt, self.options(num_predict), top):
            count += len(chunk.tokens)
            if chunk.done_reason is None:
                pieces.append(chunk.text)
            else:
                engine = chunk.engine_s
        return pieces, count, engine_ms(engine)

    # -- the measurements -------------------------------------------------------------------------

    async def standard(self, context: str) -> Sample:
        started = time.perf_counter()
        _, count, engine = await self.stream(self.target, context, STANDARD_TOKENS, 0)
        wall = (time.perf_counter() - started) * 1000
        count = max(count, 1)
        return Sample(wall / count, engine / count)

    async def draft_proposal(self, context: str, k: int) -> Sample:
        started = time.perf_counter()
        _, _, engine = await self.stream(self.draft, context, k, DRAFT_TOP_K)
        return Sample((time.perf_counter() - started) * 1000, engine)

    async def burst(self, prompts: list[str], apart: bool = False) -> Sample:
        """A validator burst as the engine sends it (Target.next_tokens); `apart`: as K+1 concurrent
        requests announcing the burst (utils/burst.py), as any Ollama without the burst endpoint gets it."""
        options = self.options()  # one dict for every position, as the greedy validator sends them
        started = time.perf_counter()
        if apart:
            burst = announce(len(prompts))
            steps = list(await asyncio.gather(*(self.server.next_token(self.target, prompt, options, 0, burst)
                                                for prompt in prompts)))
        else:
            steps = await self.server.next_tokens(self.target, prompts, [options] * len(prompts))
        wall = (time.perf_counter() - started) * 1000
        # Answers from one evaluation report the same prompt evaluation time.
        evaluations = len({step.prompt_eval_s for step in steps})
        return Sample(wall, max(engine_ms(step.engine_s) for step in steps), evaluations)

    async def one_token_steps(self, context: str, pieces: list[str]) -> list[Sample]:
        """One-token requests in a row, each prompt the last one plus its answer (so it extends the
        text the server has just cached); the first, which may follow anything, is not counted."""
        samples, prompt = [], context
        for number in range(ONE_TOKEN_STEPS + 1):
            started = time.perf_counter()
            step = await self.one(self.target, prompt, announce(1))  # a burst of one: nothing to wait for
            wall = (time.perf_counter() - started) * 1000
            if number:
                samples.append(Sample(wall, engine_ms(step.engine_s)))
            prompt += (step.token.text if step.token else "") or pieces[number % len(pieces)]
        return samples


async def free_proposals(drafter: Drafter, context: str, pieces: list[str]) -> tuple[Sample, list[Sample]]:
    """A model-free drafter's proposals of K = 8 as an answer grows by one of `pieces` at a time, as the
    decoding loop asks them: the first reads the whole context, each later one only the new token."""
    samples = []
    for step in range(len(pieces) + 1):
        started = time.perf_counter()
        await drafter.propose(context + "".join(pieces[:step]), max(KS), GREEDY)
        samples.append(Sample((time.perf_counter() - started) * 1000, 0.0))
    return samples[0], samples[1:]


async def build_context(bench: Bench, tokens_wanted: int) -> tuple[str, int]:
    """A context of about `tokens_wanted` target tokens (counted by the server)."""
    chars_per_token = 3.0
    for _ in range(3):
        text = context_text(tokens_wanted, chars_per_token)
        counted = (await bench.one(bench.target, text)).prompt_tokens
        if abs(counted - tokens_wanted) <= max(8, tokens_wanted // 50):
            return text, counted
        chars_per_token *= tokens_wanted / max(counted, 1)
    return text, counted


async def prepare(bench: Bench, tokens_wanted: int) -> tuple[Callable[[], Awaitable[None]], dict]:
    """A bench's context and rows: (one round of every measurement, the result its rounds fill)."""
    target = bench.target
    bench.num_ctx = max(4096, 1 << (tokens_wanted + 2 * STANDARD_TOKENS + max(KS) + 64).bit_length())
    about = await bench.server.about()
    context, counted = await build_context(bench, tokens_wanted)
    pieces, _, _ = await bench.stream(target, context, max(KS), 0)
    if len(pieces) < max(KS):
        raise RuntimeError(f"{target} ended after {len(pieces)} tokens; {max(KS)} are needed for the drafts")
    rows: dict[str, Row] = {"standard": Row("standard decoding, per token"),
                            "one": Row("one-token request, extending the cache")}
    rows.update({f"draft{k}": Row(f"draft proposal, K={k}") for k in KS})
    endpoint = bool(about.get("burst_endpoint"))  # the engine then sends each burst in one request
    way = bench.way or ("one HTTP request" if endpoint else "{n} requests")
    rows.update({f"burst{k}": Row(f"validator burst, K={k} ({way.format(n=k + 1)})") for k in KS})
    apart = endpoint and not bench.way  # what the same bursts cost as K+1 requests, as any other Ollama gets them
    if apart:
        rows.update({f"apart{k}": Row(f"  the same as {k + 1} requests") for k in KS})
    setup = DraftSetup(bench.server, target, bench.server, EngineConfig())
    free = {kind: await build_drafter(kind, setup) for kind in model_free_drafters()}
    proposals = {kind: (Row("reading the context"), Row("one token later")) for kind in free}

    async def round_() -> None:
        rows["standard"].samples.append(await bench.standard(context))
        rows["one"].samples.extend(await bench.one_token_steps(context, pieces))
        for k in KS:
            rows[f"draft{k}"].samples.append(await bench.draft_proposal(context, k))
            prompts = [context + "".join(pieces[:i]) for i in range(k + 1)]
            rows[f"burst{k}"].samples.append(await bench.burst(prompts))
            if apart:
                rows[f"apart{k}"].samples.append(await bench.burst(prompts, apart=True))
        for kind, drafter in free.items():
            assert drafter is not None
            first, later = await free_proposals(drafter, context, pieces)
            proposals[kind][0].samples.append(first)
            proposals[kind][1].samples.extend(later)

    return round_, {"context": counted, "embedded": bool(about.get("embedded")), "version": about.get("version"),
                    "path": bench.way.split(" ")[0] if bench.way else "http", "rows": rows, "proposals": proposals}


async def measure(benches: list[Bench], tokens_wanted: int, repeat: int,
                  progress: Callable[[str], None] | None = None) -> list[dict]:
    """Every bench's rounds interleaved, one warm-up round each, then `repeat` counted."""
    prepared = [await prepare(bench, tokens_wanted) for bench in benches]
    for round_, _ in prepared:
        await round_()  # warm-up, not counted
    for _, result in prepared:
        for row in [*result["rows"].values(), *(row for pair in result["proposals"].values() for row in pair)]:
            row.samples.clear()
    for number in range(repeat):
        if progress:
            progress(f"context {prepared[0][1]['context']}: round {number + 1} of {repeat}")
        for round_, _ in prepared:
            await round_()
    return [result for _, result in prepared]
