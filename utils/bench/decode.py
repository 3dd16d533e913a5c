"""Does a draft model loaded beside the target slow the target's plain decoding?

Speculation keeps both models loaded in the embedded server, so the target must decode as fast with
the draft beside it as alone. This times the same greedy answer before and after the draft model
is loaded, in one run, and prints the ratio (1.0 is the goal).

    .venv/bin/python -m utils.bench.decode [--target qwen2.5-coder:1.5b] [--draft qwen2.5-coder:0.5b] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import ollama

from utils.embedded.server import EmbeddedServer

PROMPT = "def quicksort(arr):"
TOKENS = 96


async def _tokens_per_second(client: ollama.AsyncClient, model: str) -> float:
    started = time.perf_counter()
    answer = await client.generate(model=model, prompt=PROMPT, raw=True,
                                   options={"temperature": 0, "num_predict": TOKENS})
    return answer.eval_count / (time.perf_counter() - started)


async def main(target: str, draft: str, repeat: int) -> None:
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="qwen2.5-coder:1.5b")
    parser.add_argument("--draft", default="qwen2.5-coder:0.5b")
    parser.add_argument("--repeat", type=int, default=3)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.target, arguments.draft, arguments.repeat))
