"""Soak test of the embedded server: several hundred mixed requests, failures counted, memory watched.

    python cli.py bench-soak [--requests 300] [--time-limit 900] [--concurrency 4]
    python cli.py bench-soak --mixed [--requests 40] [--speculation] [--proxy]

Starts its own embedded server on 127.0.0.1 (a free port), then sends a bounded number of requests
within a time limit: streamed and whole generate and chat answers, validator-style bursts of nested
one-token raw requests (context, context+d1, ...), and a few requests that must be refused (unknown
model, malformed JSON, a prompt beyond the context, out-of-range options). A failure is a request
that did not get the answer it should (a 5xx, a wrong status, a broken stream, a timeout).

It prints the requests sent, the failures, and the server's resident memory (VmRSS from
/proc/PID/status) after start-up, after the warm-up (models loaded) and at the end. Exit code 1 when
a request failed or memory grew more than --max-growth-mib after the warm-up.

`--mixed`: clients that disagree about `num_ctx` instead (clients_soak.py): no answer may be cut;
with `--speculation` the server speculates (`cli.py serve` as users start it), with `--proxy` the
clients ask `cli.py proxy` in front of it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from utils.bench.clients_soak import mixed_report, mixed_soak
from utils.embedded.server import CLI, EmbeddedServer
from utils.processes import free_port, stop_process, wait_until_healthy

TARGET = "qwen2.5-coder:0.5b"
DRAFT = "smollm2:135m"
PROMPTS = [
    "Write a Python function that reverses a string.",
    "Explain what a hash map is in two sentences.",
    "Summarise: The cat sat on the mat. It was warm. The cat slept until noon.",
    "List three prime numbers.",
    "Translate 'good morning' into French.",
    "Répète exactement : 🚀 שלום עולם — مرحبا بالعالم",
]


def rss_kib(pid: int) -> int:
    """The process's resident set size in KiB (VmRSS in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


@dataclass
class Tally:
    sent: int = 0
    failures: int = 0
    kinds: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def fail(self, kind: str, message: str) -> None:
        self.failures += 1
        if len(self.problems) < 20:
            self.problems.append(f"{kind}: {message[:200]}")


async def _expect(http: httpx.AsyncClient, kind: str, tally: Tally, body: dict | bytes, path: str, status: int,
                  stream: bool = False, key: str = "done") -> None:
    tally.sent += 1
    tally.kinds[kind] += 1
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    try:
        if stream:
            async with http.stream("POST", path, content=content) as reply:
                lines = [json.loads(line) async for line in reply.aiter_lines() if line.strip()]
            if reply.status_code != status or not lines or not lines[-1].get("done") or "error" in lines[-1]:
                tally.fail(kind, f"status {reply.status_code}, last line {lines[-1] if lines else None}")
            return
        reply = await http.post(path, content=content)
        if reply.status_code != status:
            tally.fail(kind, f"status {reply.status_code} (wanted {status}): {reply.text}")
        elif status == 200 and not reply.json().get(key):
            tally.fail(kind, f"no final answer: {reply.text}")
        elif status != 200 and not reply.json().get("error"):
            tally.fail(kind, f"no error message: {reply.text}")
    except (httpx.HTTPError, ValueError) as error:
        tally.fail(kind, f"{type(error).__name__}: {error}")


async def one_round(http: httpx.AsyncClient, index: int, tally: Tally, rng: random.Random) -> None:
    """One unit of load; about one request in five is a validator burst of 4 nested requests."""
    prompt = rng.choice(PROMPTS)
    options = {"temperature": rng.choice([0, 0.7]), "num_predict": rng.randint(4, 16), "seed": index}
    kind = index % 10
    if kind in (0, 1, 2):
        await _expect(http, "generate", tally, {"model": rng.choice([TARGET, DRAFT]), "prompt": prompt,
                                                "stream": kind == 0, "options": options}, "/api/generate", 200,
                      stream=kind == 0)
    elif kind in (3, 4, 5):
        await _expect(http, "chat", tally, {"model": rng.choice([TARGET, DRAFT]), "stream": kind == 3,
                                            "messages": [{"role": "user", "content": prompt}], "options": options},
                      "/api/chat", 200, stream=kind == 3)
    elif kind in (6, 7):
        context = f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
        pieces = ["Sure", ",", " here", " is"]
        bodies = [{"model": TARGET, "prompt": context + "".join(pieces[:i]), "raw": True, "stream": False,
                   "logprobs": True, "top_logprobs": 5, "options": {"num_predict": 1, "temperature": 0}}
                  for i in range(len(pieces))]
        await asyncio.gather(*(_expect(http, "validator burst", tally, body, "/api/generate", 200) for body in bodies))
    elif kind == 8:
        refusals: list[tuple[dict | bytes, int]] = [
            ({"model": "nosuch:1b", "prompt": "hi"}, 404),
            ({"model": "../../etc/passwd", "prompt": "hi"}, 404),
            (b'{"model": "smollm2:135m", "prompt": ', 400),
            ({"model": DRAFT, "prompt": "hi", "options": {"temperature": -1}}, 400),
            ({"model": DRAFT, "prompt": "word " * 5000, "stream": False, "truncate": False}, 400),
            ({"model": DRAFT, "prompt": "hi", "top_logprobs": 50, "logprobs": True}, 400),
        ]
        body, status = rng.choice(refusals)
        await _expect(http, "refused", tally, body, "/api/generate", status)
    else:
        await _expect(http, "show", tally, {"model": rng.choice([TARGET, DRAFT])}, "/api/show", 200,
                      key="model_info")


async def soak(url: str, pid: int, requests: int, time_limit: float, concurrency: int, seed: int = 0) -> dict:
    """Send about `requests` requests (bursts count each request), at most `time_limit` seconds."""
    tally = Tally()
    rng = random.Random(seed)
    rss = {"after start-up": rss_kib(pid)}
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(300, connect=10)) as http:
        for model in (TARGET, DRAFT):  # warm-up: load both models, so growth is measured past loading
            await _expect(http, "warm-up", tally, {"model": model, "prompt": "Hi", "stream": False,
                                                   "options": {"num_predict": 2}}, "/api/generate", 200)
        rss["after warm-up"] = rss_kib(pid)
        started = time.monotonic()
        deadline = started + time_limit
        queue: asyncio.Queue[int] = asyncio.Queue()
        planned, index = 0, 0
        while planned < requests:  # a validator burst is 4 requests, every other kind 1
            queue.put_nowait(index)
            planned += 4 if index % 10 in (6, 7) else 1
            index += 1

        async def worker() -> None:
            while time.monotonic() < deadline and not queue.empty():
                await one_round(http, queue.get_nowait(), tally, rng)

        async def sampler() -> None:  # the peak, read every second while the load runs
            while True:
                rss["peak"] = max(rss.get("peak", 0), rss_kib(pid))
                await asyncio.sleep(1.0)

        watching = asyncio.create_task(sampler())
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        watching.cancel()
        rss["at the end"] = rss_kib(pid)
        rss["peak"] = max(rss["peak"], rss["at the end"])
        seconds = time.monotonic() - started
    return {"sent": tally.sent, "failures": tally.failures, "kinds": dict(tally.kinds), "problems": tally.problems,
            "rss_kib": rss, "seconds": seconds, "timed_out": not queue.empty()}


def report(result: dict, max_growth_mib: float) -> int:
    rss = result["rss_kib"]
    growth = (rss["at the end"] - rss["after warm-up"]) / 1024
    print(f"requests sent: {result['sent']} in {result['seconds']:.0f} s"
          f"{' (time limit reached)' if result['timed_out'] else ''}")
    print("by kind: " + ", ".join(f"{kind} {count}" for kind, count in sorted(result["kinds"].items())))
    print(f"failures: {result['failures']}")
    for problem in result["problems"]:
        print(f"  {problem}")
    print("server RSS: " + ", ".join(f"{when} {kib / 1024:.0f} MiB" for when, kib in rss.items())
          + f"; growth after warm-up {growth:+.0f} MiB (limit {max_growth_mib:.0f})")
    return 0 if result["failures"] == 0 and growth <= max_growth_mib else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cli.py bench-soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="requests to send (default 300)")
    parser.add_argument("--time-limit", type=float, default=900, help="seconds of load at most (default 900)")
    parser.add_argument("--concurrency", type=int, default=4, help="clients at once (default 4)")
    parser.add_argument("--max-growth-mib", type=float, default=150,
                        help="largest RSS growth after the warm-up that passes (default 150)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mixed", action="store_true", help="clients with different num_ctx (answers, not requests)")
    parser.add_argument("--model", default=TARGET, help=f"--mixed: the model they share (default {TARGET})")
    parser.add_argument("--speculation", action="store_true", help="--mixed: the server speculates")
    parser.add_argument("--proxy", action="store_true", help="--mixed: through `cli.py proxy` in front of it")
    args = parser.parse_args(argv)
    if not 1 <= args.requests <= 100_000 or args.time_limit <= 0 or not 1 <= args.concurrency <= 64:
        print("error: --requests must be 1 to 100000, --time-limit positive, --concurrency 1 to 64", file=sys.stderr)
        return 2
    log = Path(tempfile.mkdtemp(prefix="soak-")) / "server.log"
    server = EmbeddedServer(log_path=log, speculation=args.speculation)  # 127.0.0.1, a free port
    server.start()
    assert server.process is not None  # start() started it or raised
    pid = server.process.pid
    print(f"embedded server {server.url} (pid {pid}, log {log}), "
          f"speculation {'on' if args.speculation else 'off'}")
    try:
        if args.mixed:
            with proxied(server.url, args.proxy) as url:
                result = asyncio.run(mixed_soak(url, args.model, args.requests, args.time_limit, args.seed))
                return mixed_report(result, proxied=args.proxy)
        result = asyncio.run(soak(server.url, pid, args.requests, args.time_limit,
                                  args.concurrency, args.seed))
    finally:
        server.stop()
    return report(result, args.max_growth_mib)


@contextmanager
def proxied(upstream: str, proxy: bool, args: list[str] | None = None) -> Iterator[str]:
    """`upstream`, or `cli.py proxy --upstream upstream` (and `args`, such as `--pair`) on a free port,
    stopped by its pid afterwards."""
    if not proxy:
        yield upstream
        return
    port = free_port()
    process = subprocess.Popen([sys.executable, str(CLI), "proxy", "--upstream", upstream, "--port", str(port),
                                *(args or [])],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        problem = wait_until_healthy(process, f"http://127.0.0.1:{port}/metrics", 60)
        if problem:
            raise RuntimeError(f"the proxy {problem}")
        print(f"proxy http://127.0.0.1:{port} (pid {process.pid})")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(process, grace=10)


if __name__ == "__main__":
    sys.exit(main())
