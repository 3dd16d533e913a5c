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
        [--category edit summarize] [--limit 6] [--k-max 8] [--repeat 3] [--host URL] [--in-process]

It prints the measured costs (`--in-process`: on the embedded server loaded in this process), then per
prompt the answer's length, the schedule's drafts and the bound, from wall times (what the decoding loop
pays, HTTP included) and from the engine times the server reports (an ideal verifier), and beside them the
speed-up of the eager rule llama.cpp's lookup follows (draft whatever is found, wherever it is found), with
medians per category and over all prompts. A conversation or agent session is also reported whole: its
turns' summed standard time over their summed schedule time (what the user waits for the session), with the
median and the aggregate over the sessions.

    python cli.py bench-ceiling --prompts prompts/agents.jsonl --draft suffix --max-tokens 512

With `--width N` (> 1) each proposal is asked for up to N - 1 branches (a tree, issue 43), and beside
the chain's bound the report gives a tree schedule's: at each position a standard token, a chain of
K, or the tree `draft.head(K)`, which greedy verification follows down the main chain and, at its
first wrong piece, down a branch from there whose first piece is right. A tree of R pieces is R + 1
one-token requests, priced two ways. "One evaluation": as a chain burst of R pieces, as if its rows
shared the prefix's cache in one llama_decode (the optimistic price; chain bursts are measured up to
the largest tree's rows, at most MAX_ROWS). "As served": the embedded server groups a burst's
prompts that extend one another, so a branch's requests are evaluated apart (a llama_decode of their
own, perhaps more where the pieces' lengths interleave the groups). Real tree bursts of a few shapes
are timed on the server (main K = 4..8, at the middle one branch of 1, 2 or 4 pieces or N - 1 of 2),
and a tree is charged the chain burst of its rows plus what trees with as many branches measured
above their chain bursts (the median; beyond the counts measured, the most branches' share per
branch). The report says how many of the tree schedule's drafts went down a branch.

    python cli.py bench-ceiling --prompts prompts/conversations.jsonl --draft suffix --width 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import Any, NamedTuple

from config import get_settings
from utils.bench.agents import STEP, step_kind
from utils.bench.overhead import loaded_here
from utils.bench.overhead_measure import Bench, Row, Sample, engine_ms
from utils.bench.reasoning import split, tags_of, thinks
from utils.bench.runner import BenchConfig, load_prompts
from utils.bench.schedule import (
    MAX_ROWS,
    Tree,
    agreeing,
    cheapest,
    cheapest_tree,
    eager,
    graded,
    priced,
    shape_name,
    shapes,
)
from utils.bench.stand_in import StandInError, ensure, stand_in
from utils.engine.client import OllamaClient
from utils.engine.config import EngineConfig
from utils.engine.draft import Draft
from utils.engine.drafters import Drafter, DraftSetup, build_drafter, model_free_drafters
from utils.engine.validator import node_prompts
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


async def accepted_lengths(drafter: Drafter, prompt: str, tokens: list[str], k_max: int,
                           drafting: list[float] | None = None, width: int = 1,
                           trees: list[list[Tree]] | None = None) -> list[list[int]]:
    """For each position of the answer, what the drafter's draft of 1..K pieces there would get accepted;
    `drafting` gets the seconds per drafted piece (a branch's included) of each proposal (a draft
    model's cost). Proposals are asked `width`; `trees` gets at each position what its head(K) gets."""
    table = []
    for i in range(len(tokens)):
        started = time.perf_counter()
        draft = await drafter.propose(prompt + "".join(tokens[:i]), k_max, GREEDY, width)
        if drafting is not None and len(draft):
            drafting.append((time.perf_counter() - started) / draft.rows)
        hits = agreeing(draft.pieces, tokens[i:])
        table.append([min(hits, k) for k in range(1, len(draft) + 1)])
        if trees is not None:
            trees.append([graded(draft.head(k), tokens[i:]) for k in range(1, len(draft) + 1)])
    return table


async def standard_answer(server: OllamaClient, target: str, prompt: str, max_tokens: int) -> list[str]:
    options = {"temperature": 0, "num_predict": max_tokens, "num_ctx": NUM_CTX}
    return [token.text async for chunk in server.stream_raw(target, prompt, options) for token in chunk.tokens]


async def tree_burst(bench: Bench, tree: Draft, context: str) -> Sample:
    """A tree's burst as the validator sends it (its node prompts). The server evaluates its branches
    apart, each answer reporting its own evaluation's engine time: the engine time is the sum over the
    evaluations (Bench.burst's, the largest, would be the main chain's alone)."""
    started = time.perf_counter()
    prompts = node_prompts(context, tree)
    steps = await bench.server.next_tokens(bench.target, prompts, [bench.options()] * len(prompts))
    wall = (time.perf_counter() - started) * 1000
    evaluations: dict[float | None, float] = {}  # answers of one evaluation report its prompt evaluation time
    for step in steps:
        evaluations[step.prompt_eval_s] = max(evaluations.get(step.prompt_eval_s, 0.0), engine_ms(step.engine_s))
    return Sample(wall, sum(evaluations.values()), len(evaluations))


async def measure_costs(bench: Bench, context: str, tokens: list[str], k_max: int, repeat: int,
                        trees: list[Draft] | None = None) -> dict[str, Row]:
    """A standard token, bursts of K = 1..k_max and the bursts of `trees` as served on `context`,
    interleaved round by round."""
    rows = {"standard": Row("standard token")} | {f"burst{k}": Row(f"burst, K={k}") for k in range(1, k_max + 1)}
    rows |= {f"tree{n}": Row(shape_name(tree)) for n, tree in enumerate(trees or [])}
    for number in range(repeat + 1):  # the first round warms up and is not counted
        samples = {"standard": await bench.standard(context)}
        for k in range(1, k_max + 1):
            samples[f"burst{k}"] = await bench.burst([context + "".join(tokens[:i]) for i in range(k + 1)])
        for n, tree in enumerate(trees or []):
            samples[f"tree{n}"] = await tree_burst(bench, tree, context)
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
                  max_tokens: int | None = None, width: int = 1, in_process: bool = False) -> str:
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
        largest = k_max  # the most rows a chain or tree to price has: bursts are measured up to it
        async for prompt, text, tokens in standard_turns(server, target, prompts, max_tokens):
            for name, drafter in built.items():
                trees: list[list[Tree]] = []
                accepted = await accepted_lengths(drafter, text, tokens, k_max, drafting[name], width, trees)
                answers[name].append((prompt, tokens, accepted) + ((trees,) if width > 1 else ()))
                largest = max([largest, *(tree.rows for heads in trees for tree in heads)])
                drafter.finish(text, "".join(tokens))  # what the decoder does once an answer is complete
            longest = max(longest, (text, tokens), key=lambda pair: len(pair[1]))
        timed = shapes(longest[1], k_max, width) if width > 1 else []
        largest = max([largest, *(tree.rows for tree in timed)])
        async with AsyncExitStack() as loaded:  # `in_process`: the costs on cli.py serve's path, no HTTP
            if in_process:
                bench = Bench(await loaded.enter_async_context(loaded_here()), target, target, "in process")
                bench.num_ctx = NUM_CTX
            rows = await measure_costs(bench, *longest, min(largest, MAX_ROWS), repeat, timed)
    finally:
        await server.aclose()
    return "\n\n".join(report(rows, answers[name], target, name, k_max, repeat, drafting[name], built[name].free,
                              timed, width, bench.way) for name in drafters)


def report(rows: dict[str, Row], answers: list[tuple], target: str, drafter: str, k_max: int, repeat: int,
           drafting: list[float], free: bool, timed: list[Draft] | None = None, width: int = 1, way: str = "") -> str:
    """A model-free drafter's proposals cost microseconds; a draft model's rounds are charged its median
    seconds per drafted piece, K (a tree: its rows) of them, on top of the burst (wall and engine alike).
    An answer with a fourth element, its trees (`accepted_lengths`), gets the tree schedule's bounds
    too, priced both ways, `timed` being the trees measured as served."""
    draft_ms = 0.0 if free or not drafting else statistics.median(drafting) * 1e3
    wall = {key: row.median().wall_ms + draft_ms * _k(key) for key, row in rows.items()}
    engine = {key: row.median().engine_ms + draft_ms * _k(key) for key, row in rows.items()}
    measured = sorted(_k(key) for key in rows if key.startswith("burst"))
    lines = [f"{target}, {drafter}, a clairvoyant controller (K up to {k_max}"
             + (f", trees of up to {width - 1} branches" if width > 1 else "")
             + f"); costs{f' ({way})' if way else ''}: medians of {repeat} "
             "interleaved rounds, wall ms / engine ms (x a standard token's engine time)"
             + (f", drafting included: {draft_ms:.1f} ms a piece" if draft_ms else "")]
    lines.append(f"  standard token {wall['standard']:7.1f} / {engine['standard']:6.1f}")
    for k in measured:
        key = f"burst{k}"
        steps = engine[key] / engine["standard"]
        lines.append(f"  burst, K={k}     {wall[key]:7.1f} / {engine[key]:6.1f}  (x{steps:.2f})")
    wall_extra, engine_extra, served_lines = served(rows, timed or [])
    bursts = [{k: costs[f"burst{k}"] for k in measured} for costs in (wall, engine)]
    prices = {"tree, one evaluation": [priced(burst) for burst in bursts],
              "tree, as served": [priced(burst, extra) for burst, extra in zip(bursts, (wall_extra, engine_extra))]}
    trees = width > 1 and any(len(answer) > 3 for answer in answers)
    lines += served_lines
    lines.append(f"{'prompt':20} {'tokens':>6} {'drafts':>6} {'bound, wall':>11} {'engine':>7} {'eager, wall':>11}"
                 + (f" {'tree 1-eval':>11} {'engine':>7} {'branch':>7} {'served':>7} {'engine':>7} {'branch':>7}"
                    if trees else "") + "  category")
    bounds: dict[str, dict[str, list[Bound]]] = {"": {}, **{title: {} for title in prices}}
    sessions: dict[str, dict[str, list[Bound]]] = {title: {} for title in bounds}  # a session's turns, in order
    rounds = {title: [0, 0] for title in prices}  # the tree schedules' drafts, and those down a branch
    proposed = [0, 0, 0]  # positions; with a branch proposed; where a branch was right (the whole proposal's)
    for prompt, tokens, accepted, *more in answers:
        figures, schedule, drafts = [], [], 0
        for costs, burst in zip((wall, engine), bursts):
            seconds, drafts = cheapest(accepted, costs["standard"], burst)
            figures.append(len(tokens) * costs["standard"] / seconds if seconds else 1.0)
            schedule.append(seconds)
        figures.append(len(tokens) * wall["standard"] / eager(accepted, wall["standard"], bursts[0]) if tokens else 1.0)
        standard_ms = len(tokens) * wall["standard"]
        found = {"": Bound(figures[0], figures[1], figures[2], standard_ms, schedule[0])}
        columns = ""
        if trees:
            whole_proposals = [heads[-1] for heads in more[0] if heads]
            proposed[0] += len(tokens)
            proposed[1] += sum(1 for tree in whole_proposals if tree.branches)
            proposed[2] += sum(tree.branched for tree in whole_proposals)
        for title, price in prices.items() if trees else ():
            (wall_s, tree_drafts, branched), (engine_s, _, _) = (
                cheapest_tree(accepted, more[0], costs["standard"], burst, by)
                for costs, burst, by in zip((wall, engine), bursts, price))
            found[title] = Bound(standard_ms / wall_s if wall_s else 1.0,
                                 len(tokens) * engine["standard"] / engine_s if engine_s else 1.0,
                                 figures[2], standard_ms, wall_s)
            rounds[title][0] += tree_drafts
            rounds[title][1] += branched
            columns += f" {found[title].wall:6.2f}x {found[title].engine:6.2f}x {f'{branched}/{tree_drafts}':>7}"
        for title, bound in found.items():
            bounds[title].setdefault(prompt["category"], []).append(bound)
            if "conversation" in prompt:
                sessions[title].setdefault(prompt["conversation"], []).append(bound)
        lines.append(f"{prompt['id']:20} {len(tokens):6d} {drafts:6d} {figures[0]:10.2f}x {figures[1]:6.2f}x "
                     f"{figures[2]:10.2f}x" + (f"    {columns[1:]}" if columns else "") + f"  {prompt['category']}")
    titles = list(bounds) if trees else [""]
    lines += [line for title in titles for line in summary(bounds[title], title)]
    lines += [line for title in titles for line in whole(sessions[title], title)]
    if trees:
        lines.append(f"proposals: a branch at {proposed[1]} of {proposed[0]} positions, the target's path down one "
                     f"at {proposed[2]}")
    for title in titles[1:]:
        drafts, branched = rounds[title]
        lines.append(f"{title}: {branched} of {drafts} drafts went down a branch"
                     + (f" ({branched / drafts:.0%})" if drafts else ""))
    return "\n".join(lines)


def served(rows: dict[str, Row], timed: list[Draft]) -> tuple[dict[int, float], dict[int, float], list[str]]:
    """What the trees measured as served cost above a chain burst of as many rows, wall and engine ms by
    their number of branches (the median over their shapes), and the lines that report it."""
    lines: list[str] = []
    above: dict[int, list[tuple[float, float]]] = {}
    for n, tree in enumerate(timed):
        sample, chain = rows[f"tree{n}"].median(), rows[f"burst{tree.rows}"].median()
        above.setdefault(len(tree.branches), []).append((sample.wall_ms - chain.wall_ms,
                                                         sample.engine_ms - chain.engine_ms))
        lines.append(f"  tree {shape_name(tree):14} {sample.wall_ms:7.1f} / {sample.engine_ms:6.1f}, a chain burst of "
                     f"its {tree.rows} rows {chain.wall_ms:7.1f} / {chain.engine_ms:6.1f}: "
                     f"{sample.wall_ms - chain.wall_ms:+6.1f} / {sample.engine_ms - chain.engine_ms:+6.1f}")
    wall_extra = {b: statistics.median(w for w, _ in pairs) for b, pairs in sorted(above.items())}
    engine_extra = {b: statistics.median(e for _, e in pairs) for b, pairs in sorted(above.items())}
    lines += [f"  as served, a tree of {b} branch{'es' if b > 1 else ''} costs a chain burst of its rows "
              f"{wall_extra[b]:+.1f} / {engine_extra[b]:+.1f} ms (median of {len(above[b])} shapes)" for b in above]
    return wall_extra, engine_extra, lines


def summary(bounds: dict[str, list[Bound]], title: str = "") -> list[str]:
    """Per category (an agent step's: its answer's kind) and over all: the medians and the aggregate wall;
    with a `title` (a tree schedule's), without the eager rule's."""
    lines = []
    for category, values in {**bounds, "all": [b for group in bounds.values() for b in group]}.items():
        wall_x, engine_x, eager_x = (statistics.median(b[i] for b in values) for i in range(3))
        total = aggregate(values)
        figures = (f"{title}: wall {wall_x:.2f}x, engine {engine_x:.2f}x" if title
                   else f"wall {wall_x:.2f}x, engine {engine_x:.2f}x, eager {eager_x:.2f}x")
        lines.append(f"median, {category:12} {figures} ({len(values)} prompts)"
                     + (f", aggregate wall {total:.2f}x" if total else ""))
    return lines


def whole(sessions: dict[str, list[Bound]], title: str = "") -> list[str]:
    """Each session whole, its turns' summed times (what the user waits for it), then the median over the
    sessions and the aggregate of all their turns."""
    speedups = {name: x for name, turns in sessions.items() if (x := aggregate(turns))}
    if not speedups:
        return []
    named = f"{title}: " if title else ""
    lines = [f"session {name:20} {named}aggregate wall {x:.2f}x ({len(sessions[name])} turns)"
             for name, x in speedups.items()]
    total = aggregate([b for name in speedups for b in sessions[name]])
    median = statistics.median(speedups.values())
    return lines + [f"sessions{', ' + title if title else ''}: median wall {median:.2f}x, "
                    f"aggregate wall {total:.2f}x ({len(speedups)} sessions)"]


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
    parser.add_argument("--width", type=int, default=1,
                        help="ask proposals for up to N - 1 branches and bound a tree schedule too (default 1: chains)")
    parser.add_argument("--host", default=None, help="an Ollama server (default: start the embedded server)")
    parser.add_argument("--in-process", action="store_true",
                        help="measure what a token and a burst cost on the embedded server loaded in this process "
                             "(cli.py serve's path), as `bench --in-process` runs the engine")
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
        print(asyncio.run(measure(url, args.target, prompts, drafters, args.k_max, args.repeat, args.max_tokens,
                                  args.width, args.in_process)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
