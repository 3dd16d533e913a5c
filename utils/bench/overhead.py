"""Where a speculative round's time goes: the engine, or the HTTP orchestration around it.

For standard decoding, a draft proposal and validator bursts of K+1 nested one-token requests, this
prints the wall time a client sees, the engine time the server reports (Ollama's `*_duration`
fields) and their difference, what a model-free drafter's proposal costs per generated token (the
decoding loop asks one after every standard token), and then the speed-up those times allow:

    S(K, a) = (1 - a^(K+1)) / (1 - a) * T_standard / (K * T_draft + T_burst(K))

for acceptance rates a, with the best K for each. On the embedded server the same projection is also
printed from the engine's own times (an ideal verifier with no orchestration cost), so the share lost
to orchestration is one number. Measurements are interleaved round by round and the medians kept,
because the machine is shared and noisy. Works against any Ollama server (`--host`); without one it
starts the embedded server.

    python cli.py bench-overhead [--host URL] [--target M] [--draft M] [--context N ...] [--repeat R]

Requests are the engine's own (utils/engine/client.py's keep-alive session and codec), raw prompts,
validator positions as non-streamed `num_predict` 1 requests with `logprobs`, drafts streamed with
their top log-probabilities. "Engine time" of a request is its `total_duration`; that of a burst,
the largest `total_duration` among its requests (on a server that evaluates them together, each
reports the shared evaluation; a burst the embedded server had to split into several evaluations
pays the others as time outside, and the number of evaluations is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field

from utils.burst import announce
from utils.engine.client import OllamaClient, ServerError
from utils.engine.config import EngineConfig
from utils.engine.drafters import Drafter, DraftSetup, build_drafter, model_free_drafters
from utils.engine.target import Target
from utils.sampling import GREEDY

KS = (2, 4, 8)
RATES = (0.6, 0.7, 0.8, 0.9)
STANDARD_TOKENS = 16
ONE_TOKEN_STEPS = 4  # one-token requests in a row, each prompt extending the one before by its answer
DRAFT_TOP_K = 5  # the engine's default draft_top_k
SMALL = "smollm2:135m"


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
    """The requests as the engine makes them over HTTP. `way` names another path (in_process.py)."""

    way = ""

    def __init__(self, url: str, target: str, draft: str):
        self.url, self.target, self.draft = url, target, draft
        # The engine's transport, so that "outside" is what the engine pays: its session and JSON codec.
        self.client = OllamaClient(url, connect_timeout=10.0, timeout=600.0)
        self.server: Target = self.client  # what the drafters and /api/version are read from
        self.num_ctx = 4096

    async def aclose(self) -> None:
        await self.client.aclose()

    def _body(self, model: str, prompt: str, num_predict: int, stream: bool, top: int) -> dict:
        return {"model": model, "prompt": prompt, "raw": True, "stream": stream, "logprobs": True,
                "top_logprobs": top, "options": {"temperature": 0, "num_predict": num_predict,
                                                 "num_ctx": self.num_ctx}}

    async def one(self, model: str, prompt: str, burst: dict[str, str] | None = None) -> dict:
        return await self.client._request("POST", "/api/generate", self._body(model, prompt, 1, False, 0), burst)

    async def stream(self, model: str, prompt: str, num_predict: int, top: int) -> tuple[list[str], dict]:
        pieces, final = [], {}
        body = self._body(model, prompt, num_predict, True, top)
        async for message in self.client._stream("/api/generate", body):
            if message.get("done"):
                final = message
            else:
                pieces.append(message.get("response", ""))
        return pieces, final

    # -- the measurements -------------------------------------------------------------------------

    async def standard(self, context: str) -> Sample:
        started = time.perf_counter()
        _, final = await self.stream(self.target, context, STANDARD_TOKENS, 0)
        wall = (time.perf_counter() - started) * 1000
        count = max(final.get("eval_count") or 1, 1)
        return Sample(wall / count, final["total_duration"] / 1e6 / count)

    async def draft_proposal(self, context: str, k: int) -> Sample:
        started = time.perf_counter()
        _, final = await self.stream(self.draft, context, k, DRAFT_TOP_K)
        return Sample((time.perf_counter() - started) * 1000, final["total_duration"] / 1e6)

    async def burst(self, prompts: list[str], one_request: bool) -> Sample:
        """A validator burst as the engine sends it: in one request to a server with the burst
        endpoint (utils/embedded/http/burst_api.py), else one request per prompt, announced."""
        started = time.perf_counter()
        if one_request:
            bodies = [self._body(self.target, prompt, 1, False, 0) for prompt in prompts]
            answers = (await self.client._request("POST", "/speculative/burst", {"requests": bodies}))["responses"]
        else:
            burst = announce(len(prompts))  # as the engine's validator does
            answers = await asyncio.gather(*(self.one(self.target, prompt, burst) for prompt in prompts))
        wall = (time.perf_counter() - started) * 1000
        # Requests answered from one evaluation report the same prompt_eval_duration.
        evaluations = len({a.get("prompt_eval_duration") for a in answers})
        return Sample(wall, max(a["total_duration"] for a in answers) / 1e6, evaluations)

    async def one_token_steps(self, context: str, pieces: list[str]) -> list[Sample]:
        """One-token requests in a row, each prompt the last one plus its answer (so it extends the
        text the server has just cached); the first, which may follow anything, is not counted."""
        samples, prompt = [], context
        for step in range(ONE_TOKEN_STEPS + 1):
            started = time.perf_counter()
            answer = await self.one(self.target, prompt, announce(1))  # a burst of one: nothing to wait for
            wall = (time.perf_counter() - started) * 1000
            if step:
                samples.append(Sample(wall, answer["total_duration"] / 1e6))
            prompt += answer.get("response") or pieces[step % len(pieces)]
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
        counted = (await bench.one(bench.target, text))["prompt_eval_count"]
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
    pieces, _ = await bench.stream(target, context, max(KS), 0)
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
            rows[f"burst{k}"].samples.append(await bench.burst(prompts, endpoint))
            if apart:
                rows[f"apart{k}"].samples.append(await bench.burst(prompts, False))
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


def speedup(k: int, a: float, standard: float, draft_k: float, burst_k: float) -> float:
    """S(K, a): expected tokens per round over the round's time, against standard decoding."""
    return (1 - a ** (k + 1)) / (1 - a) * standard / (draft_k + burst_k)


def projection(rows: dict[str, Row], engine: bool, drafting: bool = True) -> list[tuple[float, list[float], int]]:
    """(a, [S for each K], best K) from the medians; `engine` uses the server's engine times; without
    `drafting`, drafts cost nothing (prompt lookup)."""
    def time_of(key: str) -> float:
        if key.startswith("draft") and not drafting:
            return 0.0
        median = rows[key].median()
        return median.engine_ms if engine else median.wall_ms

    table = []
    for a in RATES:
        values = [speedup(k, a, time_of("standard"), time_of(f"draft{k}"), time_of(f"burst{k}")) for k in KS]
        table.append((a, values, KS[max(range(len(KS)), key=values.__getitem__)]))
    return table


def report(result: dict, target: str, draft: str, repeat: int) -> str:
    rows: dict[str, Row] = result["rows"]
    lines = [
        f"context {result['context']} tokens: target {target}, draft {draft}, "
        f"{'embedded server' if result['embedded'] else 'Ollama ' + str(result['version'])} "
        f"({'in process' if result['path'] == 'in' else 'over HTTP'}), "
        f"medians of {repeat} interleaved rounds, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
        f"{'measurement':44} {'wall ms':>9} {'engine ms':>9} {'outside ms':>10}  (outside: each round's "
        "wall - engine, their median)",
    ]
    for row in rows.values():
        median = row.median()
        lines.append(f"{row.label:44} {median.wall_ms:9.2f} {median.engine_ms:9.2f} {row.outside():10.2f}")
    single = rows["one"].outside()
    for k in KS:
        extra = (rows[f"burst{k}"].outside() - single) / k
        lines.append(f"extra outside time per nested request, K={k}: {extra:.2f} ms")
    for k in KS:
        lines.append(f"draft fixed overhead, K={k}: {rows[f'draft{k}'].outside():.2f} ms")
    for kind, (first, later) in result["proposals"].items():  # asked after every standard token
        lines.append(f"{kind} proposal, K={max(KS)}: {later.median().wall_ms:.3f} ms a token later, "
                     f"{first.median().wall_ms:.2f} ms reading the context")
    if result["embedded"]:  # a burst split into several evaluations pays a whole decode for each
        lines.append("evaluations per burst (median): " + ", ".join(
            f"K={k} {statistics.median(s.evaluations for s in rows[f'burst{k}'].samples):g}" for k in KS))
    tables = [("projected speed-up S(K, a), wall times", projection(rows, engine=False))]
    if result["embedded"]:
        tables.append(("ideal one-decode verifier S(K, a), engine times", projection(rows, engine=True)))
    tables.append(("prompt lookup (drafts cost nothing) S(K, a), wall times", projection(rows, False, False)))
    if result["embedded"]:
        tables.append(("prompt lookup, ideal verifier S(K, a), engine times", projection(rows, True, False)))
    for title, table in tables:
        lines.append(title)
        lines.append(f"{'a':>4} " + " ".join(f"{'K=' + str(k):>6}" for k in KS) + f" {'best K':>7} {'best S':>7}")
        for a, values, best in table:
            lines.append(f"{a:4.1f} " + " ".join(f"{v:6.2f}" for v in values) + f" {best:7d} {max(values):7.2f}")
    if result["embedded"]:
        wall, ideal = tables[0][1], tables[1][1]
        lost = [1 - max(w[1]) / max(i[1]) for w, i in zip(wall, ideal)]
        lines.append("share of the ideal speed-up lost to orchestration (best K each): "
                     + ", ".join(f"a={a:.1f} {share:.0%}" for a, share in zip(RATES, lost)))
    return "\n".join(lines)


def run(host: str | None, target: str, draft: str, contexts: list[int], repeat: int,
        progress: Callable[[str], None] | None = None, in_process: bool = False) -> str:
    """The report for each context; with `in_process`, the embedded server's in-process target too
    (in_process.py), its rounds interleaved with those over HTTP."""
    async def all_contexts(url: str) -> list[dict]:
        results = []
        for n in contexts:
            benches = [Bench(url, target, draft)]
            if in_process:
                from utils.bench.in_process import LocalBench

                benches.append(await LocalBench.start(target, draft))
            try:
                results += await measure(benches, n, repeat, progress)
            finally:
                for bench in benches:
                    await bench.aclose()
        return results

    if host:
        results = _run_loop(all_contexts(host if "://" in host else f"http://{host}"))
    else:
        from utils.embedded.server import EmbeddedServer

        with EmbeddedServer() as server:
            results = _run_loop(all_contexts(server.url))
    return "\n\n".join(report(result, target, draft, repeat) for result in results)


def _run_loop(work: Coroutine[object, object, list[dict]]) -> list[dict]:
    """`work` on the event loop that `cli.py serve` and the proxy run on: uvicorn's `loop="auto"`
    takes uvloop where it is installed (requirements.txt), and a round's hand-offs between the model's
    worker thread and the loop (the in-process path's largest cost outside the engine) cost about
    50 us less there than on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(work)
    return uvloop.run(work)


def main(argv: list[str] | None = None) -> int:
    """`cli.py bench-overhead`: the tables on stdout, progress on stderr, a failure as one error line."""
    import httpx

    parser = argparse.ArgumentParser(prog="cli.py bench-overhead", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=None, help="an Ollama server (default: start the embedded server)")
    parser.add_argument("--target", default=SMALL)
    parser.add_argument("--draft", default=SMALL)
    parser.add_argument("--context", type=int, nargs="+", default=[233, 4000], help="context sizes in tokens")
    parser.add_argument("--repeat", type=int, default=7, help="interleaved rounds (medians)")
    parser.add_argument("--in-process", action="store_true",
                        help="also measure the embedded server's in-process target (cli.py serve's path), loaded "
                             "in this process, interleaved with the HTTP rounds")
    args = parser.parse_args(argv)
    try:
        print(run(args.host, args.target, args.draft, args.context, args.repeat,
                  progress=lambda label: print(label, file=sys.stderr, flush=True), in_process=args.in_process))
    except (RuntimeError, OSError, ValueError, httpx.HTTPError, ServerError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
