"""The reasoning workload in the benchmark (prompts/reasoning.jsonl): a thinking model's answers, their
reasoning apart from their content.

A prompt or a conversation may carry `think` (true, false or a level, as Ollama's API takes it), passed
on with each of its requests; absent, the model decides (a thinking model thinks). On a stand-in target
(utils/bench/stand_in.py) the benchmark creates the model on its server first.

The project's answers come split by the engine (`thinking` apart from the text, `thinking_tokens` in the
statistics); each run also records when its first reasoning and its first content arrived, so that the
report times the reasoning and the answer apart. llama-server answers raw text: it is split here as the
server the benchmark uses splits that model's answers (utils/thinking.py), so that its runs have the same
content, and its next turns the same history, as the project's; it reports no token counts for the parts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from utils.bench.stand_in import DEFAULT
from utils.embedded.http.thinking import LEVELS
from utils.engine.answer import collect
from utils.engine.client import OllamaClient
from utils.engine.drafters import NONE as STANDARD
from utils.engine.request import GenerationRequest
from utils.engine.served import Decoder
from utils.thinking import ThinkingParser, server_tags

PROJECT = "project"  # as utils/bench/report.py names the project's engine


def think_problems(line: dict[str, Any]) -> list[str]:
    """What is wrong with a prompt line's `think` (none if it is absent or a value Ollama takes)."""
    if "think" not in line or isinstance(line["think"], bool) or line["think"] in LEVELS:
        return []
    return [f"think must be true, false or one of {', '.join(LEVELS)}, not {line['think']!r}"]


def thinks(prompt: dict[str, Any]) -> bool:
    """Whether a prompt lets a thinking model think (`think` absent, true or a level)."""
    return prompt.get("think") is not False


def asks_to_think(prompt: dict[str, Any]) -> bool:
    """Whether a prompt asks for thinking itself (`think` true or a level), which only a thinking model takes."""
    return prompt.get("think") not in (None, False)


def default_target(prompts_file: Path, target: str) -> str:
    """The target a prompt file is benchmarked on when none is named: `target`, or, for prompts that ask
    to think, the stand-in thinking model (no small thinking model is on PyPI; utils/bench/stand_in.py).
    A file that cannot be read gets `target`: the runner reports its problem."""
    try:
        lines = [json.loads(line) for line in prompts_file.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return target
    return DEFAULT if any(isinstance(line, dict) and asks_to_think(line) for line in lines) else target


async def timed_answer(decoder: Decoder, request: GenerationRequest) -> dict[str, Any]:
    """collect()'s result with `phases`: the seconds from the request to its first reasoning and to its
    first content (None where there was none), and to its end, on one clock."""
    started = time.perf_counter()
    first: dict[str, float] = {}

    def seen(part: str) -> Any:
        return lambda text: text and first.setdefault(part, time.perf_counter() - started)

    result = await collect(decoder, request, echo=seen("content"), echo_thinking=seen("thinking"))
    return {**result, "phases": {"thinking_s": first.get("thinking"), "content_s": first.get("content"),
                                 "end_s": time.perf_counter() - started}}


async def tags_of(server: OllamaClient, model: str, prompts: Sequence[dict[str, Any]] = ()) -> tuple[str, str] | None:
    """The tags the server splits `model`'s reasoning by (None: it does not split it): the embedded
    server's for a Jinja template, Ollama's inferred from a Go template. ValueError where `prompts` ask
    a model that cannot think to think (the server would refuse each with a 400)."""
    shown = await server.show(model)
    if "thinking" not in shown.get("capabilities", []):
        asking = sorted({str(p["think"]).lower() for p in prompts if asks_to_think(p)})
        if asking:
            raise ValueError(f"the prompts ask to think (think: {', '.join(asking)}) and {model} cannot think; "
                             "use a thinking model or the stand-in: --target stand-in-thinker:1.5b")
        return None
    return server_tags(shown.get("template") or "", await server.is_embedded())


def split(text: str, prompt: str, tags: tuple[str, str] | None) -> tuple[str, str]:
    """(thinking, content) of a raw answer to `prompt`, as the server splits it (no tags: all content)."""
    if tags is None:
        return "", text
    parser = ThinkingParser(*tags, prompt=prompt)
    thinking, content = parser.add(text)
    return thinking, content  # what the parser still holds at the end is dropped, as Ollama drops it


def _phase_seconds(run: dict[str, Any]) -> tuple[float, float] | None:
    """(reasoning, answer) seconds of a project run: first reasoning to first content, first content to
    the end (an answer that never closed its reasoning: all reasoning). None without reasoning."""
    phases = run.get("phases") or {}
    if phases.get("thinking_s") is None:
        return None
    ends = phases["content_s"] if phases.get("content_s") is not None else phases["end_s"]
    return ends - phases["thinking_s"], phases["end_s"] - ends


def thinking_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per speculative configuration and category (and 'all'), over the runs with reasoning and their
    standard pair: how many also answered after it, the reasoning's and the answer's tokens (the
    project's statistics; None for llama-server) and each part's speed-up, the standard's summed
    seconds over the speculative's (None for llama-server, which streams nothing here)."""
    standard = {(r.get("engine", PROJECT), r["prompt_id"], r["repeat"]): r for r in data["runs"]
                if r["drafter"] == STANDARD}
    configurations = sorted({(r.get("engine", PROJECT), r["drafter"], r["k"]) for r in data["runs"]
                             if r["drafter"] != STANDARD}, key=lambda c: (c[0] != PROJECT, c))
    rows = []
    for configuration in configurations:
        pairs = [(standard[(c[0], r["prompt_id"], r["repeat"])], r) for r in data["runs"]
                 if (c := (r.get("engine", PROJECT), r["drafter"], r["k"])) == configuration and r.get("thinking")
                 and (c[0], r["prompt_id"], r["repeat"]) in standard]
        for category in [*sorted({r["category"] for _, r in pairs}), "all"]:
            mine = [(s, r) for s, r in pairs if category in ("all", r["category"])]
            if mine:
                rows.append({**dict(zip(("engine", "drafter", "k"), configuration, strict=True)),
                             "category": category, **_parts(mine)})
    return rows


def _parts(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    thinking = [r["stats"].get("thinking_tokens") or 0 for _, r in pairs]
    counted = all(thinking) and all(r.get("engine", PROJECT) == PROJECT for _, r in pairs)
    seconds = [(_phase_seconds(s), _phase_seconds(r)) for s, r in pairs]
    timed = all(s and r for s, r in seconds)

    def ratio(part: int) -> float | None:
        faster = sum(r[part] for _, r in seconds if r)
        return sum(s[part] for s, _ in seconds if s) / faster if timed and faster else None

    return {"runs": len(pairs), "answered": sum(bool(r["text"].strip()) for _, r in pairs),
            "thinking_tokens": sum(thinking) if counted else None,
            "answer_tokens": sum(r["stats"]["output_tokens"] for _, r in pairs) - sum(thinking) if counted else None,
            "thinking_speedup": ratio(0), "answer_speedup": ratio(1)}


def thinking_markdown(data: dict[str, Any]) -> list[str]:
    """The report's section on reasoning answers (none if no run has reasoning)."""
    rows = thinking_rows(data)
    if not rows:
        return []

    def cell(value: float | int | None, form: str) -> str:
        return "-" if value is None else form.format(value)

    lines = ["## Reasoning and answer apart", "",
             "Runs whose answer has reasoning (`thinking`), with the standard run of the same prompt. Answered: "
             "those that also gave content after it. Tokens: summed, from the project's statistics. Speed-up of "
             "each part: the standard's summed seconds over the speculative's, the reasoning from its first "
             "piece to the answer's first, the answer from there to the end (llama-server streams nothing here: "
             "-).", "",
             "| engine | drafter | K | category | runs | answered | reasoning tokens | answer tokens | "
             "reasoning speed-up | answer speed-up |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['engine']} | {r['drafter']} | {r['k']} | {r['category']} | {r['runs']} | {r['answered']} | "
              f"{cell(r['thinking_tokens'], '{}')} | {cell(r['answer_tokens'], '{}')} | "
              f"{cell(r['thinking_speedup'], '{:.2f}x')} | {cell(r['answer_speedup'], '{:.2f}x')} |" for r in rows]
    return [*lines, ""]

