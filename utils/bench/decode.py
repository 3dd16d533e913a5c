"""Plain decoding on the embedded server: what slows it, measured in one run.

By default: does a draft model loaded beside the target slow the target's plain decoding?
Speculation keeps both models loaded, so the target must decode as fast with the draft beside it as
alone. This times the same greedy answer before and after the draft model is loaded and prints the
ratio (1.0 is the goal).

With `--native`: what exactness costs. Four servers answer the same greedy prompts in turn, the
same GGUF on the same threads: the embedded server as shipped (repacked weights, every row
computed as it would be alone), the embedded server with SPEC_FAST_BATCHES=1 (upstream's batch
kernels throughout, not exact), and llama.cpp's llama-server (the `bench --native` anchor) twice:
with the embedded server's OpenMP wait (GOMP_SPINCOUNT, the same for both) and with libgomp's
default, which spins far longer between steps (faster on a quiet machine, much slower
beside a busy core). It prints each one's engine tokens/s for decoding (96 tokens) and for reading
a prompt of about 600 new tokens, as the engines report them, every run's figure, and the ratios
to llama-server at the same wait.

    python cli.py bench-decode [--target qwen2.5-coder:1.5b] [--draft qwen2.5-coder:0.5b] [--repeat 3]
    python cli.py bench-decode --native [--target qwen2.5-coder:1.5b --target qwen2.5-coder:0.5b] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from contextlib import ExitStack

import httpx
import ollama

from config import get_settings
from utils.bench.native import NativeServer, server_binary
from utils.embedded.server import EmbeddedServer
from utils.embedded.store.models import ModelStore

PROMPT = "def quicksort(arr):"
TOKENS = 96


def _count(value: int | None) -> int:
    """One of an answer's counts or durations, which every Ollama reports with a finished answer."""
    if not value:
        raise RuntimeError("the server's answer reports no token count or duration")
    return value


async def _tokens_per_second(client: ollama.AsyncClient, model: str) -> float:
    started = time.perf_counter()
    answer = await client.generate(model=model, prompt=PROMPT, raw=True,
                                   options={"temperature": 0, "num_predict": TOKENS})
    return _count(answer.eval_count) / (time.perf_counter() - started)


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


# About 600 tokens of prose that no cache holds: each run puts its own number first.
READING = "Notes on a garden, kept over one year. " + " ".join(
    f"In week {week} the beds were weeded, the tomatoes tied and watered, and the soil checked for damp."
    for week in range(1, 27))


async def _embedded_rates(client: ollama.AsyncClient, model: str, run: int) -> tuple[float, float]:
    """(decode tok/s, prompt tok/s) of one embedded server, from its own eval and prompt_eval timings."""
    decode = await client.generate(model=model, prompt=PROMPT, raw=True,
                                   options={"temperature": 0, "num_predict": TOKENS})
    read = await client.generate(model=model, prompt=f"{run}. {READING}", raw=True,
                                 options={"temperature": 0, "num_predict": 1})
    return (_count(decode.eval_count) / (_count(decode.eval_duration) / 1e9),
            _count(read.prompt_eval_count) / (_count(read.prompt_eval_duration) / 1e9))


async def _native_rates(client: httpx.AsyncClient, url: str, run: int) -> tuple[float, float]:
    """The same two figures from llama-server's own timings (its prompt cache off for the reading)."""
    decode = await client.post(f"{url}/completion", json={"prompt": PROMPT, "n_predict": TOKENS, "temperature": 0})
    read = await client.post(f"{url}/completion", json={"prompt": f"{run}. {READING}", "n_predict": 1,
                                                        "temperature": 0, "cache_prompt": False})
    return decode.json()["timings"]["predicted_per_second"], read.json()["timings"]["prompt_per_second"]


def _embedded(stack: ExitStack, fast_batches: bool) -> EmbeddedServer:
    before = os.environ.get("SPEC_FAST_BATCHES")
    os.environ["SPEC_FAST_BATCHES"] = "1" if fast_batches else "0"  # the server process reads it at start
    try:
        return stack.enter_context(EmbeddedServer())
    finally:
        if before is None:
            del os.environ["SPEC_FAST_BATCHES"]
        else:
            os.environ["SPEC_FAST_BATCHES"] = before


async def against_llama_server(targets: list[str], repeat: int) -> None:
    store = ModelStore(get_settings().models_dir)
    threads = os.cpu_count() or 2
    print(f"greedy, engine tok/s, {repeat} runs in turn per server, median [each run]; {threads} threads")
    with ExitStack() as stack:
        exact = ollama.AsyncClient(host=_embedded(stack, fast_batches=False).url)
        fast = ollama.AsyncClient(host=_embedded(stack, fast_batches=True).url)
        for target in targets:
            same = NativeServer(server_binary(), store.path(target), [], threads, num_ctx=4096)
            spinning = NativeServer(server_binary(), store.path(target), [], threads, num_ctx=4096, spin_count=None)
            natives = (same, spinning)
            try:
                for native in natives:
                    native.start()
                rates = await _interleaved(target, exact, fast, same.url, spinning.url, repeat)
            finally:
                for native in natives:
                    native.stop()
            _print_rates(target, rates)


async def _interleaved(target: str, exact: ollama.AsyncClient, fast: ollama.AsyncClient, native_url: str,
                       spinning_url: str, repeat: int) -> dict[str, list[tuple[float, float]]]:
    async with httpx.AsyncClient(timeout=600) as http:
        engines = {
            "embedded, exact (default)": lambda run: _embedded_rates(exact, target, run),
            "embedded, SPEC_FAST_BATCHES=1": lambda run: _embedded_rates(fast, target, run),
            "llama-server": lambda run: _native_rates(http, native_url, run),
            "llama-server, libgomp's wait": lambda run: _native_rates(http, spinning_url, run),
        }
        for measure in engines.values():
            await measure(-1)  # loads the model; not counted
        rates: dict[str, list[tuple[float, float]]] = {label: [] for label in engines}
        for run in range(repeat):  # in turn, so that all see the same machine
            for label, measure in engines.items():
                rates[label].append(await measure(run))
    return rates


def _print_rates(target: str, rates: dict[str, list[tuple[float, float]]]) -> None:
    anchor = [statistics.median(values) for values in zip(*rates["llama-server"])]
    print(f"{target}:")
    for label, runs in rates.items():
        parts = []
        for column, (name, values) in enumerate((("decode", [r[0] for r in runs]), ("prompt", [r[1] for r in runs]))):
            median = statistics.median(values)
            parts.append(f"{name} {median:6.1f} ({median / anchor[column]:.2f}x) {[round(v, 1) for v in values]}")
        print(f"  {label:30} " + "   ".join(parts))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cli.py bench-decode", description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", help="repeatable with --native (default qwen2.5-coder:1.5b)")
    parser.add_argument("--draft", default="qwen2.5-coder:0.5b")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--native", action="store_true",
                        help="the embedded server, exact and with fast batches, beside llama-server")
    arguments = parser.parse_args(argv)
    targets = arguments.target or ["qwen2.5-coder:1.5b"]
    if arguments.native:
        asyncio.run(against_llama_server(targets, arguments.repeat))
    else:
        asyncio.run(draft_beside(targets[0], arguments.draft, arguments.repeat))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
