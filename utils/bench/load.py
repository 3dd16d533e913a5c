"""Speculation under load (`cli.py bench-load`): N clients at once, speculation off and on interleaved.

    python cli.py bench-load [--prompts prompts/conversations.jsonl] [--clients 1,2,4] [--target MODEL]
                             [--turns 2] [--max-tokens 64] [--repeat 2] [--proxy] [--busy-core] [--out DIR]

For each N it starts `cli.py serve` (speculating; with `--proxy`, `cli.py serve --no-speculation` with
`cli.py proxy` in front, which speculates) on 127.0.0.1, a fresh one per N so that no N copies answers
the drafter remembers from another. N clients then each run one multi-turn workload of the prompt file
(a conversation, or an agent session with its tools and scripted tool results, as `bench` asks them)
over streamed /api/chat, sending back their own answers, all at once: one round. Rounds alternate
speculation off (each request with `X-Speculation: off`) and on, in pairs on the same workloads, the
order swapped every pair (off, on, on, off, ...), so that a machine that slows down, and the server's
cached prompts that favour whoever goes second, hit both alike. `--repeat` is the pairs per N.

The report (report.md, results.json in --out): aggregate tokens/s with and without speculation and
their ratio, each client's time to its first token and its p50/p95 time per token (an answer's time
from its first token to its last over the tokens after the first), and how many answers were
identical (greedy: speculation must not change a character). `--busy-core` runs a busy loop in another
process for the whole benchmark (a machine busy with other work), stopped by its pid at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from config import get_settings
from utils.bench.load_report import write_load_report
from utils.bench.runner import BenchConfig, load_prompts, machine
from utils.bench.soak import proxied
from utils.burst import NO_SPECULATION
from utils.embedded.server import EmbeddedServer
from utils.processes import stop_process

MODES = ("off", "on")


def workloads(prompts_file: Path, turns: int | None) -> list[list[dict[str, Any]]]:
    """The prompt file's conversations and agent sessions, each a list of its turns (`bench`'s), the
    first `turns` of each."""
    steps = load_prompts(BenchConfig(prompts_file=prompts_file, target="", drafters=[]))
    grouped: dict[str, list[dict[str, Any]]] = {}
    for step in steps:
        grouped.setdefault(step.get("conversation", step["id"]), []).append(step)
    return [group[:turns] if turns else group for group in grouped.values()]


async def _answer(http: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    """One streamed /api/chat answer: its message and the client's timings."""
    started, first, last = time.perf_counter(), None, None
    text: list[str] = []
    thinking: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    done: dict[str, Any] = {}
    async with http.stream("POST", "/api/chat", json=body, headers=headers) as reply:
        if reply.status_code != 200:
            raise RuntimeError(f"/api/chat: {reply.status_code} {(await reply.aread())[:300]!r}")
        async for line in reply.aiter_lines():
            if not line.strip():
                continue
            chunk = json.loads(line)
            if "error" in chunk:
                raise RuntimeError(f"/api/chat: {chunk['error']}")
            message = chunk.get("message", {})
            if message.get("content") or message.get("thinking") or message.get("tool_calls"):
                first = first or time.perf_counter()
                last = time.perf_counter()
            text.append(message.get("content", ""))
            thinking.append(message.get("thinking", ""))
            tool_calls += message.get("tool_calls") or []
            if chunk.get("done"):
                done = chunk
    ended = time.perf_counter()
    tokens = done.get("eval_count", 0)
    first, last = first or ended, last or ended
    return {"text": "".join(text), "thinking": "".join(thinking), "tool_calls": tool_calls, "tokens": tokens,
            "done_reason": done.get("done_reason"), "first_token_s": first - started, "seconds": ended - started,
            "per_token_s": (last - first) / (tokens - 1) if tokens > 1 else None}


async def _client(http: httpx.AsyncClient, model: str, workload: list[dict[str, Any]], max_tokens: int,
                  mode: str, client: int) -> list[dict[str, Any]]:
    """One client's workload, turn by turn, each after its own earlier answers, as a chat client asks."""
    messages: list[dict[str, Any]] = []
    answers = []
    headers = dict(NO_SPECULATION) if mode == "off" else {}
    for turn in workload:
        messages += turn["said"]
        body = {"model": model, "messages": messages, "stream": True,
                "options": {"temperature": 0, "seed": 0, "num_predict": max_tokens or turn.get("max_tokens", 128)},
                **({"tools": turn["tools"]} if turn.get("tools") else {}),
                **({"think": turn["think"]} if "think" in turn else {})}
        answer = await _answer(http, body, headers)
        said = {"tool_calls": answer["tool_calls"]} if answer["tool_calls"] else {}
        messages.append({"role": "assistant", "content": answer["text"], **said})
        answers.append({"client": client, "workload": turn.get("conversation", turn["id"]),
                        "turn": turn.get("turn", 1), **answer})
    return answers


async def _round(url: str, model: str, chosen: list[list[dict[str, Any]]], max_tokens: int,
                 mode: str) -> dict[str, Any]:
    """All clients at once, one workload each; the round's time is from the start to the last answer."""
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(1800, connect=10)) as http:
        started = time.perf_counter()
        per_client = await asyncio.gather(*(_client(http, model, workload, max_tokens, mode, number)
                                            for number, workload in enumerate(chosen)))
        seconds = time.perf_counter() - started
    return {"mode": mode, "seconds": seconds, "answers": [a for answers in per_client for a in answers]}


async def _warm(url: str, model: str) -> None:
    """The model loaded, and each mode's path taken once, before anything is timed."""
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600, connect=10)) as http:
        for headers in (dict(NO_SPECULATION), {}):
            body = {"model": model, "stream": False, "options": {"num_predict": 4, "temperature": 0},
                    "messages": [{"role": "user", "content": "Hello"}]}
            reply = await http.post("/api/chat", json=body, headers=headers)
            if reply.status_code != 200:
                raise RuntimeError(f"warm-up: {reply.status_code} {reply.text[:300]}")


@contextmanager
def serving(model: str, pair: str | None, proxy: bool, log: Path) -> Iterator[str]:
    """`cli.py serve` speculating for `model` (with `pair`'s drafter, else its default), or with `proxy`
    a standard `cli.py serve` with `cli.py proxy` speculating in front; stopped by pid at the end."""
    pairing = ["--pair", f"{model}={pair}"] if pair else []
    server = EmbeddedServer(log_path=log, speculation=not proxy, args=[] if proxy else pairing)
    server.start(timeout=180)
    try:
        with proxied(server.url, proxy, pairing) as url:
            yield url
    finally:
        server.stop()


@contextmanager
def busy_core(on: bool) -> Iterator[int | None]:
    """A busy loop in another process, holding one core, stopped by its pid; its pid, or None."""
    if not on:
        yield None
        return
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        yield process.pid
    finally:
        stop_process(process, grace=5)


def run_load(config: dict[str, Any], out: Path, progress: Any = None) -> dict[str, Any]:
    """The benchmark (`config`: main's options as a dict); writes results.json and report.md into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    chosen_from = workloads(Path(config["prompts"]), config["turns"])
    data: dict[str, Any] = {"config": config, "machine": machine(), "started": datetime.now(UTC).isoformat(),
                            "load_average": os.getloadavg(), "levels": []}
    log = out / "server.log"
    with busy_core(config["busy_core"]) as busy:
        data["busy_core_pid"] = busy
        for clients in config["clients"]:
            level: dict[str, Any] = {"clients": clients, "rounds": []}
            data["levels"].append(level)
            with serving(config["target"], config["pair"], config["proxy"], log) as url:
                asyncio.run(_warm(url, config["target"]))
                for pair in range(config["repeat"]):
                    chosen = [chosen_from[(pair * clients + i) % len(chosen_from)] for i in range(clients)]
                    for mode in (MODES if pair % 2 == 0 else MODES[::-1]):
                        if progress:
                            progress(f"{clients} client(s), pair {pair + 1}/{config['repeat']}, speculation {mode}")
                        result = asyncio.run(_round(url, config["target"], chosen, config["max_tokens"], mode))
                        level["rounds"].append({"pair": pair, **result})
                        (out / "results.json").write_text(json.dumps(data, indent=1, ensure_ascii=False))
    data["load_average_end"] = os.getloadavg()
    (out / "results.json").write_text(json.dumps(data, indent=1, ensure_ascii=False))
    write_load_report(out, data)
    return data


def _counts(text: str) -> list[int]:
    numbers = sorted({int(part) for part in text.split(",") if part.strip()})
    if not numbers or min(numbers) < 1 or max(numbers) > 64:
        raise argparse.ArgumentTypeError(f"clients must be whole numbers from 1 to 64, not {text!r}")
    return numbers


def main(argv: list[str] | None = None) -> int:
    settings = get_settings()
    parser = argparse.ArgumentParser(prog="cli.py bench-load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", default="prompts/conversations.jsonl",
                        help="conversations or agent sessions (default prompts/conversations.jsonl)")
    parser.add_argument("--clients", type=_counts, default=_counts(f"1,2,4,{settings.num_parallel}"),
                        help=f"client counts, comma-separated (default 1,2,4 and the slot count, "
                             f"{settings.num_parallel})")
    parser.add_argument("--target", default=settings.target_model)
    parser.add_argument("--pair", default=None, help="the drafter: a draft model, 'lookup' or 'suffix' "
                                                     "(default: cli.py serve's or the proxy's own default)")
    parser.add_argument("--turns", type=int, default=None, help="the first N turns of each workload (default all)")
    parser.add_argument("--max-tokens", type=int, default=0, help="tokens an answer at most (default: the prompt's)")
    parser.add_argument("--repeat", type=int, default=2, help="pairs of rounds (off and on) per N (default 2)")
    parser.add_argument("--proxy", action="store_true", help="through `cli.py proxy` in front of `cli.py serve`")
    parser.add_argument("--busy-core", action="store_true", help="another process holds one core throughout")
    parser.add_argument("--out", default=None, help="output folder (default: DATA_DIR/bench/load-TIMESTAMP)")
    args = parser.parse_args(argv)
    if args.repeat < 1 or (args.turns is not None and args.turns < 1) or args.max_tokens < 0:
        print("error: --repeat and --turns must be at least 1, --max-tokens not negative", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else settings.data_dir / "bench" / datetime.now().strftime("load-%Y%m%d-%H%M%S")
    config = {key: value for key, value in vars(args).items() if key != "out"}
    print(f"results in {out}; server log {out / 'server.log'}", file=sys.stderr)
    try:
        run_load(config, out, lambda label: print(f"  {label}", file=sys.stderr, flush=True))
    except (RuntimeError, ValueError, OSError, httpx.HTTPError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print((out / "report.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
