"""Verification's cost: is a validator burst about as cheap as one request on the embedded server?

The prompt-prefix validator checks K drafted tokens by sending K+1 nested one-token requests at
once (C, C+d1, ..., C+d1..dK). The server is meant to answer them from one evaluation, so the burst
should cost about what ONE request costs that evaluates the same K extra tokens beyond a cached C.
This measures both on a warm prefix and prints their ratio next to the goal.

    python cli.py bench-verification [--model qwen2.5-coder:1.5b] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import ollama

from utils.embedded.server import EmbeddedServer

KS = (2, 4, 8)
GOAL = 1.25  # nested / single
GREEDY_ONE = {"temperature": 0, "num_predict": 1}

# A raw ChatML prompt of about 200 tokens, like the ones the validator extends.
CONTEXT = """<|im_start|>system
You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>
<|im_start|>user
Here is part of my inventory module:

```python
from dataclasses import dataclass


@dataclass
class Item:
    name: str
    price: float
    quantity: int


class Inventory:
    def __init__(self):
        self.items: dict[str, Item] = {}

    def add(self, item: Item) -> None:
        if item.name in self.items:
            self.items[item.name].quantity += item.quantity
        else:
            self.items[item.name] = item

    def remove(self, name: str, quantity: int) -> None:
        item = self.items[name]
        item.quantity -= quantity
        if item.quantity <= 0:
            del self.items[name]
```

Add a method `total_value` that returns the value of all items in stock,
and a method `cheapest` that returns the cheapest item or None.<|im_end|>
<|im_start|>assistant
"""


async def draft_pieces(client: ollama.AsyncClient, model: str, count: int) -> list[str]:
    """The model's own greedy continuation of CONTEXT, one token per streamed chunk, so every draft
    is accepted and each nested prompt is one token longer than the one before."""
    stream = await client.generate(
        model=model, prompt=CONTEXT, raw=True, stream=True, logprobs=True,
        options={"temperature": 0, "num_predict": count},
    )
    pieces = [chunk.response or "" async for chunk in stream if not chunk.done]
    if len(pieces) < count:
        raise RuntimeError(f"{model} ended after {len(pieces)} tokens; {count} drafts are needed")
    return pieces


async def one_token(client: ollama.AsyncClient, model: str, prompt: str) -> ollama.GenerateResponse:
    return await client.generate(model=model, prompt=prompt, raw=True, options=GREEDY_ONE)


async def timed_ms(client: ollama.AsyncClient, model: str, prompts: list[str]) -> float:
    """Wall time of `prompts` sent at once, after a request for CONTEXT alone puts it in the cache."""
    await one_token(client, model, CONTEXT)
    started = time.perf_counter()
    await asyncio.gather(*(one_token(client, model, prompt) for prompt in prompts))
    return (time.perf_counter() - started) * 1000


async def bench(url: str, model: str, repeat: int) -> list[tuple[int, float, float]]:
    """(K, median nested ms, median single ms) for each K; nested and single runs alternate so that
    a slow spell of the machine hits both alike."""
    client = ollama.AsyncClient(host=url)
    pieces = await draft_pieces(client, model, max(KS))
    context_tokens = (await one_token(client, model, CONTEXT)).prompt_eval_count
    print(f"model {model}, context {context_tokens} tokens, drafts {''.join(pieces)!r}")
    rows = []
    for k in KS:
        prompts = [CONTEXT + "".join(pieces[:i]) for i in range(k + 1)]
        await timed_ms(client, model, prompts)  # untimed warm-up for this burst size
        nested, single = [], []
        for _ in range(repeat):
            nested.append(await timed_ms(client, model, prompts))
            single.append(await timed_ms(client, model, prompts[-1:]))
        rows.append((k, statistics.median(nested), statistics.median(single)))
    return rows


def print_table(rows: list[tuple[int, float, float]]) -> None:
    # Other processes on the machine distort CPU timings; the load average tells how much.
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'K':>3}  {'nested ms':>10}  {'single ms':>10}  {'ratio':>6}  goal <= {GOAL}")
    for k, nested, single in rows:
        ratio = nested / single
        verdict = "met" if ratio <= GOAL else "MISSED"
        print(f"{k:>3}  {nested:>10.1f}  {single:>10.1f}  {ratio:>6.2f}  {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cli.py bench-verification", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder:1.5b")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    with EmbeddedServer() as server:
        rows = asyncio.run(bench(server.url, args.model, args.repeat))
    print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
