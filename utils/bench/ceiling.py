"""The most a drafter can give with this engine on this machine: a clairvoyant controller's speed-up.

For each benchmark prompt the target's standard greedy answer is generated, token by token; a
conversation (prompts/conversations.jsonl) turn by turn, each turn after the standard answers to the
turns before, and each answer then given to the drafters (`finish`: the suffix drafter's tree of
earlier answers learns it, as in a session). An agent session (prompts/agents.jsonl) goes step by step
as `bench` asks it (utils/bench/agents.py): each step after the standard answers to the steps before and
the scripted tool results, rendered with the session's tools, and reported by its answer's kind (a
call, a file write, a final answer). At every position each drafter's proposal (lookup,
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
all prompts. A conversation or agent session is also reported whole: its turns' summed standard
time over their summed schedule time (what the user waits for the session), with the median and the
aggregate over the sessions.

    python cli.py bench-ceiling --prompts prompts/agents.jsonl --draft suffix --max-tokens 512
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import AsyncIterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, NamedTuple

from config import get_settings
from utils.bench.agents import STEP, step_kind
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


class Bound(NamedTuple):
    """One answer's speed-ups (the schedule's from wall and engine times, the eager rule's from wall
    times) and its wall times in ms: standard (tokens x a standard token) and the schedule's."""
    wall: float
    engine: float
    eager: float
    standard_ms: float
    schedule_ms: float


def aggregate(bounds: list[Bound]) -> float | None:
    """The summed standard times over the summed schedule times: a long answer weighs more, as in
    `bench`'s aggregate (None without time to divide by)."""
    schedule = sum(b.schedule_ms for b in bounds)
    return sum(b.standard_ms for b in bounds) / schedule if schedule else None


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


async def standard_turns(server: OllamaClient, target: str, prompts: list[dict],
                         max_tokens: int | None) -> AsyncIterator[tuple[dict, str, list[str]]]:
    """Each prompt, the text the target sees and its standard answer's tokens, in order. A conversation's
    turn or an agent's step is asked as `bench` asks its standard configuration: after the standard
    answers to those before; an agent step comes with its answer's kind as its category."""
    history: dict[str, list[dict[str, Any]]] = {}  # a conversation's or session's messages so far
    tags = await tags_of(server, target, prompts)  # a thinking model's: its answers reason, then answer
    for prompt in prompts:
        text = prompt["prompt"]
        # What was said before this turn's answer (an agent step's: the tool result), after the turns before.
        said = prompt.get("said") or [{"role": "user", "content": text}]
        messages = [*history.get(prompt.get("conversation", ""), []), *said]
        if prompt.get("chat", True):  # rendered with the prompt's `think` and tools, as the benchmark renders it
            text = await server.render_chat(target, messages, {"num_ctx": NUM_CTX}, prompt.get("think"),
                                            prompt.get("tools"))
        # The raw continuation, reasoning included: what the engine speculates for a thinking answer.
        tokens = await standard_answer(server, target, text, max_tokens or prompt.get("max_tokens", 128))
        # The answer as the server splits it, as a client sends it back and as `bench` reads its kind.
        thinking, content = split("".join(tokens), text, tags if thinks(prompt) else None)
        if "conversation" in prompt:
            answer = {"role": "assistant", "content": content, **({"thinking": thinking} if thinking else {})}
            history[prompt["conversation"]] = [*messages, answer]
        if prompt["category"] == STEP:  # an agent step is reported by its answer's kind, as `bench` does
            prompt = {**prompt, "category": step_kind(content)}
        yield prompt, text, tokens


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
        longest: tuple[str, list[str]] = ("", [])
        async for prompt, text, tokens in standard_turns(server, target, prompts, max_tokens):
            for name, drafter in built.items():
                answers[name].append((prompt, tokens, await accepted_lengths(drafter, text, tokens, k_max,
                                                                             drafting[name])))
                drafter.finish(text, "".join(tokens))  # what the decoder does once an answer is complete
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
    lines.append(f"{'prompt':20} {'tokens':>6} {'drafts':>6} {'bound, wall':>11} {'engine':>7} {'eager, wall':>11}"
                 "  category")
    bounds: dict[str, list[Bound]] = {}
    sessions: dict[str, list[Bound]] = {}  # a conversation's or agent session's turns, in order
    for prompt, tokens, accepted in answers:
        figures, schedule, drafts = [], [], 0
        for costs in (wall, engine):
            bursts = {k: costs[f"burst{k}"] for k in range(1, k_max + 1)}
            seconds, drafts = cheapest(accepted, costs["standard"], bursts)
            figures.append(len(tokens) * costs["standard"] / seconds if seconds else 1.0)
            schedule.append(seconds)
        bursts = {k: wall[f"burst{k}"] for k in range(1, k_max + 1)}
        figures.append(len(tokens) * wall["standard"] / eager(accepted, wall["standard"], bursts) if tokens else 1.0)
        bound = Bound(figures[0], figures[1], figures[2], len(tokens) * wall["standard"], schedule[0])
        bounds.setdefault(prompt["category"], []).append(bound)
        if "conversation" in prompt:
            sessions.setdefault(prompt["conversation"], []).append(bound)
        lines.append(f"{prompt['id']:20} {len(tokens):6d} {drafts:6d} {figures[0]:10.2f}x {figures[1]:6.2f}x "
                     f"{figures[2]:10.2f}x  {prompt['category']}")
    return "\n".join(lines + summary(bounds) + whole(sessions))


def summary(bounds: dict[str, list[Bound]]) -> list[str]:
    """Per category (an agent step's: its answer's kind) and over all: the medians and the aggregate wall."""
    lines = []
    for category, values in {**bounds, "all": [b for group in bounds.values() for b in group]}.items():
        wall_x, engine_x, eager_x = (statistics.median(b[i] for b in values) for i in range(3))
        total = aggregate(values)
        lines.append(f"median, {category:12} wall {wall_x:.2f}x, engine {engine_x:.2f}x, eager {eager_x:.2f}x "
                     f"({len(values)} prompts)" + (f", aggregate wall {total:.2f}x" if total else ""))
    return lines


def whole(sessions: dict[str, list[Bound]]) -> list[str]:
    """Each session whole, its turns' summed times (what the user waits for it), then the median over the
    sessions and the aggregate of all their turns."""
    speedups = {name: x for name, turns in sessions.items() if (x := aggregate(turns))}
    if not speedups:
        return []
    lines = [f"session {name:20} aggregate wall {x:.2f}x ({len(sessions[name])} turns)"
             for name, x in speedups.items()]
    total = aggregate([b for name in speedups for b in sessions[name]])
    return lines + [f"sessions: median wall {statistics.median(speedups.values()):.2f}x, aggregate wall "
                    f"{total:.2f}x ({len(speedups)} sessions)"]


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
