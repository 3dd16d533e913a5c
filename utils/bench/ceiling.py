"""The most a drafter can give with this engine on this machine: a clairvoyant controller's speed-up.

For each benchmark prompt the target's standard greedy answer is generated, token by token; a
conversation (prompts/conversations.jsonl) turn by turn, each turn after the standard answers to the
turns before, and each answer then given to the drafters (`finish`: the suffix drafter's tree of
earlier answers learns it, as in a session). At every position each drafter's proposal (lookup,
suffix, a draft model) is compared with the tokens that really follow, so what a draft of each K
would have had accepted is known in advance. With the costs measured on this server (a standard
token and a validator burst of K + 1 rows, interleaved, medians; for a draft model also its median
time per drafted piece, K of them a round), dynamic programming then finds the cheapest way through
the answer: at each position either one standard token, or a draft of some K that yields its
accepted tokens and the target's own token after them. No controller can beat that schedule, since
it knows every verdict before asking; where its speed-up is below a goal, the goal is out of reach
for that drafter with this engine on this machine, whatever the controller does.

    python cli.py bench-ceiling [--target M] [--draft lookup --draft suffix] [--prompts FILE]
        [--category edit summarize] [--limit 6] [--k-max 8] [--repeat 3] [--host URL]

It prints the measured costs, then per prompt the answer's length, the schedule's drafts and the
bound, from wall times (what the decoding loop pays, HTTP included) and from the engine times the
server reports (an ideal verifier), and beside them the speed-up of the eager rule llama.cpp's
lookup follows (draft whatever is found, wherever it is found), with medians per category and over
all prompts.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from config import get_settings
from utils.bench.overhead_measure import Bench, Row
from utils.bench.reasoning import split, tags_of, thinks
from utils.bench.runner import BenchConfig, load_prompts
from utils.bench.stand_in import StandInError, ensure, stand_in
from utils.engine.client import OllamaClient
from utils.engine.config import EngineConfig
from utils.engine.drafters import Drafter, DraftSetup, build_drafter, model_free_drafters
from utils.sampling import GREEDY

NUM_CTX = 4096
PROMPTS = Path(__file__).resolve().parents[2] / "prompts" / "bench.jsonl"


def cheapest(accepted: list[list[int]], standard: float, burst: dict[int, float]) -> tuple[float, int]:
    """The least time to produce an answer of len(accepted) tokens, and the drafts that take it.

    accepted[i][k - 1]: tokens a draft of k pieces at position i gets accepted (only the K the
    drafter could fill there); standard: a standard token's time; burst[k]: verifying k pieces."""
    n = len(accepted)
    best, drafts = [0.0] * (n + 1), [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        best[i], drafts[i] = standard + best[i + 1], drafts[i + 1]
        for k, hits in enumerate(accepted[i], start=1):
            after = min(n, i + hits + 1)  # the accepted pieces, then the target's own token
            if burst[k] + best[after] < best[i]:
                best[i], drafts[i] = burst[k] + best[after], drafts[after] + 1
    return best[0], drafts[0]


def eager(accepted: list[list[int]], standard: float, burst: dict[int, float]) -> float:
    """The time of the rule llama.cpp's lookup follows: draft all the drafter finds, wherever it finds it."""
    i, seconds = 0, 0.0
    while i < len(accepted):
        if accepted[i]:
            seconds += burst[len(accepted[i])]
            i += accepted[i][-1] + 1
        else:
            seconds += standard
            i += 1
    return seconds


async def accepted_lengths(drafter: Drafter, prompt: str, tokens: list[str], k_max: int,
                           drafting: list[float] | None = None) -> list[list[int]]:
    """For each position of the answer, what the drafter's draft of 1..K pieces there would get accepted;
    `drafting` gets the seconds per drafted piece of each proposal (a draft model's cost)."""
    table = []
    for i in range(len(tokens)):
        started = time.perf_counter()
        draft = await drafter.propose(prompt + "".join(tokens[:i]), k_max, GREEDY)
        if drafting is not None and len(draft):
            drafting.append((time.perf_counter() - started) / len(draft))
        hits = 0
        while hits < len(draft) and i + hits < len(tokens) and draft.pieces[hits] == tokens[i + hits]:
            hits += 1
        table.append([min(hits, k) for k in range(1, len(draft) + 1)])
    return table


async def standard_answer(server: OllamaClient, target: str, prompt: str, max_tokens: int) -> list[str]:
    options = {"temperature": 0, "num_predict": max_tokens, "num_ctx": NUM_CTX}
    return [token.text async for chunk in server.stream_raw(target, prompt, options) for token in chunk.tokens]


async def measure_costs(bench: Bench, context: str, tokens: list[str], k_max: int, repeat: int) -> dict[str, Row]:
    """A standard token and bursts of K = 1..k_max on `context`, interleaved round by round."""
    rows = {"standard": Row("standard token")} | {f"burst{k}": Row(f"burst, K={k}") for k in range(1, k_max + 1)}
    for number in range(repeat + 1):  # the first round warms up and is not counted
        samples = {"standard": await bench.standard(context)}
        for k in range(1, k_max + 1):
            samples[f"burst{k}"] = await bench.burst([context + "".join(tokens[:i]) for i in range(k + 1)])
        for key, sample in samples.items():
            if number:
                rows[key].samples.append(sample)
    return rows


async def measure(url: str, target: str, prompts: list[dict], drafters: list[str], k_max: int, repeat: int,
                  max_tokens: int | None = None) -> str:
    server = OllamaClient(url, timeout=600.0)
    bench = Bench(server, target, target)
    try:
        bench.num_ctx = NUM_CTX
        setup = DraftSetup(server, target, server, EngineConfig())
        built: dict[str, Drafter] = {}
        for name in drafters:
            drafter = await build_drafter(name, setup)
            if drafter is None:  # "none": standard generation proposes nothing to bound
                raise ValueError(f"--draft {name}: not a drafter")
            built[name] = drafter
        answers: dict[str, list[tuple]] = {name: [] for name in drafters}
        drafting: dict[str, list[float]] = {name: [] for name in drafters}  # seconds per drafted piece
        history: dict[str, list[dict[str, str]]] = {}  # a conversation's turns so far, with the standard answers
        longest: tuple[str, list[str]] = ("", [])
        tags = await tags_of(server, target, prompts)  # a thinking model's: its answers reason, then answer
        for prompt in prompts:
            text = prompt["prompt"]
            messages = [*history.get(prompt.get("conversation", ""), []), {"role": "user", "content": text}]
            if prompt.get("chat", True):  # rendered with the prompt's `think`, as the benchmark renders it
                text = await server.render_chat(target, messages, {"num_ctx": NUM_CTX}, prompt.get("think"))
            # The raw continuation, reasoning included: what the engine speculates for a thinking answer.
            tokens = await standard_answer(server, target, text, max_tokens or prompt.get("max_tokens", 128))
            for name, drafter in built.items():
                answers[name].append((prompt, tokens, await accepted_lengths(drafter, text, tokens, k_max,
                                                                             drafting[name])))
                drafter.finish(text, "".join(tokens))  # what the decoder does once an answer is complete
            if "conversation" in prompt:  # the answer as the server splits it, as a client sends it back
                thinking, content = split("".join(tokens), text, tags if thinks(prompt) else None)
                answer = {"role": "assistant", "content": content, **({"thinking": thinking} if thinking else {})}
                history[prompt["conversation"]] = [*messages, answer]
            longest = max(longest, (text, tokens), key=lambda pair: len(pair[1]))
        rows = await measure_costs(bench, *longest, k_max, repeat)
    finally:
        await server.aclose()
    return "\n\n".join(report(rows, answers[name], target, name, k_max, repeat, drafting[name], built[name].free)
                       for name in drafters)


def report(rows: dict[str, Row], answers: list[tuple], target: str, drafter: str, k_max: int, repeat: int,
           drafting: list[float], free: bool) -> str:
    """A model-free drafter's proposals cost microseconds; a draft model's rounds are charged its median
    seconds per drafted piece, K times, on top of the burst (wall and engine alike)."""
    draft_ms = 0.0 if free or not drafting else statistics.median(drafting) * 1e3
    wall = {key: row.median().wall_ms + draft_ms * _k(key) for key, row in rows.items()}
    engine = {key: row.median().engine_ms + draft_ms * _k(key) for key, row in rows.items()}
    lines = [f"{target}, {drafter}, a clairvoyant controller (K up to {k_max}); costs: medians of {repeat} "
             "interleaved rounds, wall ms / engine ms (x a standard token's engine time)"
             + (f", drafting included: {draft_ms:.1f} ms a piece" if draft_ms else "")]
    lines.append(f"  standard token {wall['standard']:7.1f} / {engine['standard']:6.1f}")
    for k in range(1, k_max + 1):
        key = f"burst{k}"
        steps = engine[key] / engine["standard"]
        lines.append(f"  burst, K={k}     {wall[key]:7.1f} / {engine[key]:6.1f}  (x{steps:.2f})")
    lines.append(f"{'prompt':14} {'tokens':>6} {'drafts':>6} {'bound, wall':>11} {'engine':>7} {'eager, wall':>11}")
    bounds: dict[str, list[tuple[float, ...]]] = {}
    for prompt, tokens, accepted in answers:
        figures, drafts = [], 0
        for costs in (wall, engine):
            bursts = {k: costs[f"burst{k}"] for k in range(1, k_max + 1)}
            seconds, drafts = cheapest(accepted, costs["standard"], bursts)
            figures.append(len(tokens) * costs["standard"] / seconds if seconds else 1.0)
        bursts = {k: wall[f"burst{k}"] for k in range(1, k_max + 1)}
        figures.append(len(tokens) * wall["standard"] / eager(accepted, wall["standard"], bursts) if tokens else 1.0)
        best_wall = cheapest(accepted, wall["standard"], {k: wall[f"burst{k}"] for k in range(1, k_max + 1)})[0]
        bounds.setdefault(prompt["category"], []).append((*figures, len(tokens) * wall["standard"], best_wall))
        lines.append(f"{prompt['id']:14} {len(tokens):6d} {drafts:6d} {figures[0]:10.2f}x {figures[1]:6.2f}x "
                     f"{figures[2]:10.2f}x")
    bounds["all"] = [b for category in list(bounds) for b in bounds[category]]
    for category, values in bounds.items():
        wall_x, engine_x, eager_x = (statistics.median(v[i] for v in values) for i in range(3))
        best = sum(v[4] for v in values)  # the summed times: a long answer weighs more, as in `bench`'s aggregate
        aggregate = f", aggregate wall {sum(v[3] for v in values) / best:.2f}x" if best else ""
        lines.append(f"median, {category:9} wall {wall_x:.2f}x, engine {engine_x:.2f}x, eager {eager_x:.2f}x "
                     f"({len(values)} prompts){aggregate}")
    return "\n".join(lines)


def _k(key: str) -> int:
    return int(key[len("burst"):]) if key.startswith("burst") else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cli.py bench-ceiling", description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="qwen2.5-coder:1.5b")
    parser.add_argument("--draft", action="append",
                        help=f"a drafter: {', '.join(sorted(model_free_drafters()))} or a draft model "
                             "(repeatable; default: lookup)")
    parser.add_argument("--prompts", type=Path, default=PROMPTS, help="prompts or conversations (JSON lines)")
    parser.add_argument("--category", nargs="+", default=None,
                        help="only these categories (default for prompts/bench.jsonl: edit summarize)")
    parser.add_argument("--max-tokens", type=int, default=None, help="override each prompt's max_tokens")
    parser.add_argument("--limit", type=int, default=6, help="the first N prompts of each category")
    parser.add_argument("--k-max", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--host", default=None, help="an Ollama server (default: start the embedded server)")
    args = parser.parse_args(argv)
    categories = args.category or (["edit", "summarize"] if args.prompts == PROMPTS else None)
    drafters = args.draft or ["lookup"]
    config = BenchConfig(args.prompts, args.target, drafters, limit=args.limit, categories=categories)
    prompts = load_prompts(config)
    from utils.embedded.server import EmbeddedServer

    settings = get_settings()
    with ExitStack() as stack:
        url = args.host or stack.enter_context(EmbeddedServer()).url
        if stand_in(args.target):  # a stand-in thinking model: made and registered if missing (or why not)
            try:
                ensure(url, args.target, settings.data_dir, settings.models_dir)
            except StandInError as error:
                print(f"error: {error.message}", file=sys.stderr)
                return 1
        print(asyncio.run(measure(url, args.target, prompts, drafters, args.k_max, args.repeat, args.max_tokens)))
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
