"""Plain decoding on the embedded server: what slows it, measured in one run.

By default: does a draft model loaded beside the target slow the target's plain decoding?
Speculation keeps both models loaded, so the target must decode as fast with the draft beside it as
alone. This times the same greedy answer before and after the draft model is loaded and prints the
ratio (1.0 is the goal).

With `--fast-batches`: what exactness costs plain decoding. Two embedded servers, one as shipped
(no weight repacking: every row computed alike in a batch and alone) and one with
SPEC_FAST_BATCHES=1, answer the same greedy prompt alternately; it prints each one's engine tokens/s
(`eval_duration`, as the server reports it) and the ratio.

    python cli.py bench-decode [--target qwen2.5-coder:1.5b] [--draft qwen2.5-coder:0.5b] [--repeat 3]
    python cli.py bench-decode --fast-batches [--target qwen2.5-coder:1.5b] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from contextlib import ExitStack

import ollama

from utils.embedded.server import EmbeddedServer

PROMPT = "def quicksort(arr):"
TOKENS = 96


async def _tokens_per_second(client: ollama.AsyncClient, model: str) -> float:
    started = time.perf_counter()
    answer = await client.generate(model=model, prompt=PROMPT, raw=True,
                                   options={"temperature": 0, "num_predict": TOKENS})
    return answer.eval_count / (time.perf_counter() - started)


async def draft_beside(target: str, draft: str, repeat: int) -> None:
    with EmbeddedServer() as server:
        client = ollama.AsyncClient(host=server.url)
        await client.generate(model=target, prompt="Hi", raw=True, options={"num_predict": 2})
        alone = [await _tokens_per_second(client, target) for _ in range(repeat)]
        await client.generate(model=draft, prompt=PROMPT, raw=True, options={"num_predict": 16})
        beside = [await _tokens_per_second(client, target) for _ in range(repeat)]
    print(f"{target} greedy, {TOKENS} tokens, median of {repeat}:")
    print(f"  alone:             {statistics.median(alone):5.1f} tok/s  {[round(x, 1) for x in alone]}")
    print(f"  {draft} loaded: {statistics.median(beside):5.1f} tok/s  {[round(x, 1) for x in beside]}")
    print(f"  ratio: {statistics.median(beside) / statistics.median(alone):.2f} (goal 1.0)")


async def _engine_tokens_per_second(client: ollama.AsyncClient, model: str) -> float:
    answer = await client.generate(model=model, prompt=PROMPT, raw=True,
                                   options={"temperature": 0, "num_predict": TOKENS})
    return answer.eval_count / (answer.eval_duration / 1e9)


async def fast_batches(target: str, repeat: int) -> None:
    with ExitStack() as stack:
        clients = {}
        for label, fast in (("exact (default)", "0"), ("SPEC_FAST_BATCHES=1", "1")):
            before = os.environ.get("SPEC_FAST_BATCHES")
            os.environ["SPEC_FAST_BATCHES"] = fast  # the server process reads it at start
            try:
                server = stack.enter_context(EmbeddedServer())
            finally:
                if before is None:
                    del os.environ["SPEC_FAST_BATCHES"]
                else:
                    os.environ["SPEC_FAST_BATCHES"] = before
            clients[label] = ollama.AsyncClient(host=server.url)
            await _engine_tokens_per_second(clients[label], target)  # loads the model; not counted
        speeds: dict[str, list[float]] = {label: [] for label in clients}
        for _ in range(repeat):  # alternately, so that both see the same machine
            for label, client in clients.items():
                speeds[label].append(await _engine_tokens_per_second(client, target))
    print(f"{target} greedy, {TOKENS} tokens, engine tok/s, median of {repeat} alternate runs:")
    for label, values in speeds.items():
        print(f"  {label:20} {statistics.median(values):5.1f} tok/s  {[round(x, 1) for x in values]}")
    exact, fast = (statistics.median(values) for values in speeds.values())
    print(f"  exact / fast: {exact / fast:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cli.py bench-decode", description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="qwen2.5-coder:1.5b")
    parser.add_argument("--draft", default="qwen2.5-coder:0.5b")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fast-batches", action="store_true", help="exact against fast batch kernels")
    arguments = parser.parse_args(argv)
    if arguments.fast_batches:
        asyncio.run(fast_batches(arguments.target, arguments.repeat))
    else:
        asyncio.run(draft_beside(arguments.target, arguments.draft, arguments.repeat))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
