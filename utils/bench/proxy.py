"""Going through the speculative proxy against going straight to its upstream, as a client sees it.

Each prompt is evaluated once (unmeasured), then asked both ways, the order alternating, and the
ratio of the client-side tokens per second (eval_count over wall time) is taken per pair; the median
and quartiles of those ratios are printed per category and overall. With `--no-batch` the upstream
is an embedded server that serves one request at a time (as Ollama with OLLAMA_NUM_PARALLEL=1):
speculation cannot pay there, and the controller must bring the proxy back to standard speed.

    python cli.py bench-proxy [--model smollm2:135m] [--drafter lookup] [--no-batch]
        [--limit 3] [--repeat 2] [--max-tokens 96] [--upstream http://127.0.0.1:11434]
        [--serve] [--noise] [--fresh]

With `--serve` there is no proxy: `cli.py serve` speculates inside the server (its in-process
target), and "direct" is the same server asked with `X-Speculation: off` (standard generation).

With `--noise` each prompt is also asked directly a second time, the three answers in rotated order,
and the ratio of the second direct answer to the first is printed beside: how far one answer's ratio
moves with nothing changed, against which "no answer below 0.97x" can be read.

With `--fresh` every pass starts its own server (and proxy), so that every answer is a first-time
one (a drafter that learns from answers would otherwise copy the pass before), and each prompt is
also read as the median of its passes: one answer's ratio moves by about ±3% alone on a shared
machine, the median of three by less.

Beside the speeds it prints how many answers through the proxy were identical to the direct ones, and
the server's self-consistency: how many direct answers were the same when the same request came again
a repeat later. On the embedded server both are 100%; on a llama.cpp-based server (Ollama 0.30+) a
row's logits depend on the batch and the cache, and identity can be no better than self-consistency.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Generator, Iterator
from contextlib import AbstractContextManager, closing, contextmanager, nullcontext
from pathlib import Path
from types import SimpleNamespace

import httpx
import ollama

from utils.burst import NO_SPECULATION
from utils.embedded.server import EmbeddedServer
from utils.processes import free_port, stop_process, wait_until_healthy

ROOT = Path(__file__).resolve().parents[2]


def _answer(client: ollama.Client, model: str, prompt: str, max_tokens: int) -> tuple[int, float, str]:
    """Tokens answered (eval_count), the wall time of the answer as the client saw it, and its text."""
    started = time.perf_counter()
    answer = client.chat(model=model, messages=[{"role": "user", "content": prompt}],
                         options={"temperature": 0, "num_predict": max_tokens})
    return answer.eval_count or 0, time.perf_counter() - started, answer.message.content or ""


def _modes(metrics: str) -> dict[str, int]:
    """The proxy's /api/chat answers so far by mode (speculative, forwarded), from its /metrics text."""
    found = re.findall(r'spec_proxy_requests_total\{endpoint="/api/chat",mode="(\w+)"\} (\S+)', metrics)
    return {"speculative": 0, "forwarded": 0, **{mode: int(float(value)) for mode, value in found}}


def _quartiles(values: list[float]) -> str:
    if len(values) < 2:
        return ""
    q = statistics.quantiles(values, n=4)
    return f"({q[0]:.2f}-{q[2]:.2f})"


@contextmanager
def _endpoints(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    """The server to ask directly and the one that speculates (the same one with `--serve`; else a
    proxy started in front of it), stopped afterwards."""
    server: AbstractContextManager
    if args.serve:  # one server: speculating, and standard when asked with X-Speculation: off
        pair = ["--pair", f"{args.model}={args.drafter}"]
        server = EmbeddedServer(batch=not args.no_batch, speculation=True, args=pair)
    elif args.upstream:
        server = nullcontext(SimpleNamespace(url=args.upstream))
    else:
        server = EmbeddedServer(batch=not args.no_batch)
    with server as upstream:
        if args.serve:
            yield upstream.url, upstream.url
            return
        port = free_port()
        process = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "proxy", "--upstream", upstream.url,
                                    "--port", str(port), "--pair", f"{args.model}={args.drafter}"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            problem = wait_until_healthy(process, f"http://127.0.0.1:{port}/metrics", 60)
            if problem:
                raise SystemExit(f"error: the proxy {problem}")
            yield upstream.url, f"http://127.0.0.1:{port}"
        finally:
            stop_process(process, grace=10)


def _servers(args: argparse.Namespace) -> Generator[tuple[str, str, range], None, None]:
    """(direct URL, speculating URL, the passes run on them): one server for every pass, or with
    `--fresh` a server (and proxy) of its own for each, whose drafter has learned nothing yet."""
    for passes in ([range(n, n + 1) for n in range(args.repeat)] if args.fresh else [range(args.repeat)]):
        with _endpoints(args) as (upstream, url):
            yield upstream, url, passes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cli.py bench-proxy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2:135m")
    parser.add_argument("--drafter", default="lookup")
    parser.add_argument("--no-batch", action="store_true", help="an upstream that serialises requests")
    parser.add_argument("--upstream", default=None,
                        help="an Ollama already running (e.g. http://127.0.0.1:11434) instead of an embedded server")
    parser.add_argument("--limit", type=int, default=3, help="prompts per category")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--serve", action="store_true",
                        help="no proxy: cli.py serve speculating in process, against itself with X-Speculation: off")
    parser.add_argument("--noise", action="store_true",
                        help="also ask each prompt directly a second time, in the same rotation: the ratios one "
                             "answer against another of the same kind give (the measurement's own spread)")
    parser.add_argument("--fresh", action="store_true",
                        help="each pass on a freshly started server (and proxy): every answer a first-time one, "
                             "and with --repeat N each prompt's ratio is also read as the median of its N")
    args = parser.parse_args(argv)
    prompts = [json.loads(line) for line in (ROOT / "prompts" / "bench.jsonl").open()]
    chosen = [p for c in dict.fromkeys(p["category"] for p in prompts)
              for p in [q for q in prompts if q["category"] == c][: args.limit]]
    noise: list[float] = []  # direct again over direct: what one answer's ratio varies by alone
    ratios: dict[str, list[float]] = {}
    by_mode: dict[str, list[float]] = {}
    by_prompt: dict[str, tuple[list[float], list[float]]] = {}  # a prompt's ratios, and its noise ratios
    seconds = {"direct": 0.0, "through": 0.0}  # the whole run's answering time each way
    identical: list[bool] = []  # through the proxy == direct, the same prompt in the same pair
    consistent: list[bool] = []  # direct == direct in the first repeat: the server against itself
    first_direct: dict[str, str] = {}
    modes, skipped = {"speculative": 0, "forwarded": 0}, 0
    with closing(_servers(args)) as servers:
        for upstream, url, passes in servers:
            direct = ollama.Client(host=upstream, headers=NO_SPECULATION if args.serve else {})
            through = ollama.Client(host=url)
            again = ollama.Client(host=upstream, headers=NO_SPECULATION if args.serve else {})
            for client in (direct, through):  # load the model; let the controller meet the server
                _answer(client, args.model, chosen[0]["prompt"], 32)
            for repeat in passes:
                for index, prompt in enumerate(chosen):
                    order = [direct, through] if (index + repeat) % 2 == 0 else [through, direct]
                    if args.noise:  # each of the three first, second and third in turn
                        order = [[direct, through, again], [through, again, direct],
                                 [again, direct, through]][(index + repeat) % 3]
                    # The prompt evaluated once beforehand: whichever side goes first would otherwise
                    # pay for it alone (half a second for a long prompt here, against ~0.7 s of answer).
                    _answer(direct, args.model, prompt["prompt"], 1)
                    before = _modes(httpx.get(f"{url}/metrics").text)
                    answers = {id(c): _answer(c, args.model, prompt["prompt"], args.max_tokens) for c in order}
                    speed = {key: tokens / wall for key, (tokens, wall, _) in answers.items()}
                    text = {side: answers[id(client)][2] for side, client in (("direct", direct), ("through", through))}
                    identical.append(text["through"] == text["direct"])
                    if prompt["id"] in first_direct:
                        consistent.append(text["direct"] == first_direct[prompt["id"]])
                    first_direct.setdefault(prompt["id"], text["direct"])
                    after = _modes(httpx.get(f"{url}/metrics").text)
                    mode = "speculated" if after["speculative"] > before["speculative"] else "forwarded"
                    ratio = speed[id(through)] / speed[id(direct)] if speed[id(direct)] else float("nan")
                    ratios.setdefault(prompt["category"], []).append(ratio)
                    by_prompt.setdefault(prompt["id"], ([], []))[0].append(ratio)
                    for side, client in (("direct", direct), ("through", through)):
                        seconds[side] += answers[id(client)][1]
                    by_mode.setdefault(mode, []).append(ratio)
                    if args.noise:
                        noise.append(speed[id(again)] / speed[id(direct)] if speed[id(direct)] else float("nan"))
                        by_prompt[prompt["id"]][1].append(noise[-1])
                    extra = f"; direct again {speed[id(again)]:6.1f} tok/s, ratio {noise[-1]:.2f}" if args.noise else ""
                    print(f"  {prompt['id']:12} #{repeat + 1}: direct {speed[id(direct)]:6.1f} tok/s, "
                          f"through the proxy {speed[id(through)]:6.1f} tok/s ({mode}), ratio {ratio:.2f}{extra}",
                          flush=True)
            counts = httpx.get(f"{url}/metrics").text  # the server's counters, before it stops
            modes = {mode: modes[mode] + count for mode, count in _modes(counts).items()}
            found = re.search(r'spec_proxy_forwarded_total\{endpoint="/api/chat",reason="no_gain"\} (\S+)', counts)
            skipped += int(float(found.group(1))) if found else 0
    upstream_kind = args.upstream or ("serialising (--no-batch) embedded" if args.no_batch else "batching embedded")
    if args.serve:
        print(f"\n{args.model} with {args.drafter}, cli.py serve speculating in process ({upstream_kind} runner), "
              f"greedy, {args.max_tokens} tokens; speculating tok/s over X-Speculation: off tok/s, median (p25-p75):")
    else:
        print(f"\n{args.model} with {args.drafter}, {upstream_kind} upstream, greedy, {args.max_tokens} tokens;"
              " proxy tok/s over direct tok/s, median (p25-p75):")
    everything = [r for values in ratios.values() for r in values]
    for category, values in [*ratios.items(), ("all", everything)]:
        print(f"  {category:10} {statistics.median(values):.2f}x {_quartiles(values)}  n={len(values)}")
    for mode, values in sorted(by_mode.items()):
        print(f"  {mode:10} {statistics.median(values):.2f}x {_quartiles(values)}  n={len(values)}")
    below = sum(r < 0.97 for r in everything)
    print(f"  answers below 0.97x: {below} of {len(everything)}"
          + (f"; direct again over direct (the measurement's own spread): {statistics.median(noise):.2f}x "
             f"{_quartiles(noise)}, {sum(r < 0.97 for r in noise)} of {len(noise)} below 0.97x" if noise else ""))
    if args.fresh and args.repeat > 1:
        print(_per_prompt(by_prompt, args.repeat))
    print(f"  the whole run, as time spent answering: {seconds['direct'] / seconds['through']:.3f}x "
          f"({seconds['direct']:.1f} s direct, {seconds['through']:.1f} s through the proxy)")
    print(f"  identical to the direct answer: {sum(identical)} of {len(identical)}; the server's self-consistency "
          f"(the same direct request again, a repeat later): {sum(consistent)} of {len(consistent)}")
    print(f"  through the proxy: {modes['speculative']} answers speculated, {modes['forwarded']} "
          f"forwarded ({skipped} because speculation had not paid lately)")
    return 0


def _per_prompt(by_prompt: dict[str, tuple[list[float], list[float]]], passes: int) -> str:
    """Each prompt's first-time answers read together: the median of its ratios over the passes, and
    the same for direct again over direct, which shows how far such a median still moves alone."""
    medians = {key: statistics.median(values) for key, (values, _) in by_prompt.items()}
    below = ", ".join(f"{key} {value:.2f}x" for key, value in medians.items() if value < 0.97) or "none"
    line = (f"  per prompt, the median of its {passes} first-time answers: {statistics.median(medians.values()):.2f}x "
            f"{_quartiles(list(medians.values()))}, below 0.97x: {below}")
    if all(spread for _, spread in by_prompt.values()):
        alone = [statistics.median(spread) for _, spread in by_prompt.values()]
        line += (f"; direct again over direct, the same way: {statistics.median(alone):.2f}x {_quartiles(alone)}, "
                 f"{sum(value < 0.97 for value in alone)} of {len(alone)} below 0.97x, lowest {min(alone):.2f}x")
    return line


if __name__ == "__main__":
    raise SystemExit(main())
