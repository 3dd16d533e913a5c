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
        [--in-process]

Its parts: overhead_measure.py makes and times the requests, through the engine's own `Target` (over
HTTP `OllamaClient`; with `--in-process` also the embedded server's in-process target, loaded in
this process as `cli.py serve` loads it), and overhead_report.py prints the tables.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager

from utils.bench.overhead_measure import Bench, measure
from utils.bench.overhead_report import report
from utils.engine.client import OllamaClient, ServerError
from utils.engine.target import Target

SMALL = "smollm2:135m"


def run(host: str | None, target: str, draft: str, contexts: list[int], repeat: int,
        progress: Callable[[str], None] | None = None, in_process: bool = False) -> str:
    """The report for each context; with `in_process`, the embedded server's in-process target too,
    its rounds interleaved with those over HTTP. Each context starts from new targets."""
    async def one_context(url: str, tokens: int) -> list[dict]:
        # The engine's transport, so that "outside" is what the engine pays: its session and JSON codec.
        http = OllamaClient(url, connect_timeout=10.0, timeout=600.0)
        try:
            benches = [Bench(http, target, draft)]
            if not in_process:
                return await measure(benches, tokens, repeat, progress)
            async with loaded_here() as local:
                return await measure([*benches, Bench(local, target, draft, "in process")], tokens, repeat, progress)
        finally:
            await http.aclose()

    async def all_contexts(url: str) -> list[dict]:
        return [result for tokens in contexts for result in await one_context(url, tokens)]

    if host:
        results = _run_loop(all_contexts(host if "://" in host else f"http://{host}"))
    else:
        from utils.embedded.server import EmbeddedServer

        with EmbeddedServer() as server:
            results = _run_loop(all_contexts(server.url))
    return "\n\n".join(report(result, target, draft, repeat) for result in results)


@asynccontextmanager
async def loaded_here() -> AsyncIterator[Target]:
    """The embedded server in this process, with the settings `cli.py serve` gives it, as the target
    `cli.py serve` speculates on. Imported only here: the HTTP path loads no llama.cpp."""
    from config import get_settings
    from utils.embedded.server import load_app

    load_app()  # llama.cpp's libraries (and its threads' spin count) before anything imports numpy
    from utils.embedded.http.target import in_process_target
    from utils.embedded.store.models import ModelStore

    settings = get_settings()
    async with in_process_target(ModelStore(settings.models_dir, settings.source_dirs), threads=os.cpu_count() or 2,
                                 fast_batches=settings.fast_batches, gpu_layers=settings.gpu_layers,
                                 parallel=settings.num_parallel) as local:
        yield local


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
