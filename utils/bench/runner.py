"""Benchmarks: standard against speculative generation, interleaved, on a prompt set.

Every prompt is answered by standard generation and by each (drafter, K) configuration, in an order
that alternates between repeats, so that a machine that slows down or warms up affects all alike.
Every run is saved to results.json as it finishes: an interrupted benchmark resumes where it stopped
when the same command is run again. report.md and the plots are made from results.json.

Speed-up is the median, over prompts and repeats, of speculative tokens/s divided by the standard
tokens/s of the same prompt and repeat. The bound is what the speculative rounds themselves allow:
(tokens per speculative round / seconds per speculative round) x seconds per standard token. It is
the speed-up if every round were like the measured ones; below 1, speculation cannot pay on this
machine and the adaptive controller should fall back to K = 0.

A line's `think` (true, false or a level) goes with its requests; the reasoning workload
(prompts/reasoning.jsonl, utils/bench/reasoning.py) runs on a thinking model or the stand-in of
utils/bench/stand_in.py, created on the server if missing, and its reasoning is reported apart.

A multi-turn line, a conversation (prompts/conversations.jsonl) or an agent session with tools and
scripted tool results (prompts/agents.jsonl, utils/bench/agents.py), is asked turn by turn, each turn
after the configuration's own earlier answers; an agent step is reported by the kind of its answer.

With `native`, llama.cpp's own llama-server (utils/native.py) answers the same prompts too, plainly
and with its own speculative decoding, interleaved with the rest; its speed-up is measured against
its own plain decoding, so the report shows both engines' speed-ups on the same machine and prompts.

With `in_process`, the project's engine, standard and speculative, runs on the embedded server loaded
in this process, as `cli.py serve` speculates: where a standard segment is left for a draft, the
token the server was computing is kept (a drain), where over HTTP the stream is closed and the draft
waits for that token, lost (about one standard token per such round). The HTTP server still
registers the stand-in and renders llama-server's prompts; it evaluates nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import threading
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from config import Settings
from utils.bench.agents import STEP, session_problems, session_steps, step_kind
from utils.bench.native import ANCHOR, NativeError, NativeServer, server_binary, speculation_args
from utils.bench.overhead import loaded_here
from utils.bench.reasoning import split, tags_of, think_problems, thinks, timed_answer
from utils.bench.report import NATIVE, PROJECT, engine_of, same, summarize, write_report
from utils.bench.stand_in import ensure, stand_in
from utils.embedded.runtime.loaded import DEFAULT_NUM_CTX
from utils.embedded.store.models import ModelStore, normalize_name
from utils.engine.answer import collect
from utils.engine.client import OllamaClient
from utils.engine.decoder import SpeculativeDecoder, build_decoder
from utils.engine.drafters import NONE as STANDARD
from utils.engine.drafters import model_free_drafters
from utils.engine.memory import EngineMemory
from utils.engine.request import GenerationRequest
from utils.engine.target import Target
from utils.hosts import servers
from utils.sampling import SamplingOptions

Progress = Callable[[int, int, str], None]


@dataclass
class BenchConfig:
    prompts_file: Path
    target: str
    drafters: list[str]
    ks: list[str] = field(default_factory=lambda: ["auto"])
    repeat: int = 1
    out_dir: Path | None = None
    limit: int | None = None  # the first N prompts of each category
    max_tokens: int | None = None  # overrides each prompt's max_tokens
    categories: list[str] | None = None
    host: str | None = None
    temperature: float = 0.0
    native: bool = False  # also run llama.cpp's own llama-server, plain and speculative
    # The project's engine on the embedded server loaded in this process (`cli.py serve`'s path: a
    # standard segment left for a draft is drained, its token in flight kept), not over HTTP.
    in_process: bool = False

    def configurations(self) -> list[tuple[str, str, str]]:
        """(engine, drafter, k) triples, each engine's standard first."""
        speculative = [(d, k) for d in self.drafters if d != STANDARD for k in self.ks]
        configurations = [(PROJECT, STANDARD, "0")] + [(PROJECT, d, k) for d, k in speculative]
        # K = 0 would be llama-server's plain decoding again; auto:N and tree:W are the project's
        if self.native:
            configurations += [(NATIVE, STANDARD, "0")] + [(NATIVE, d, k) for d, k in speculative
                                                          if k != "0" and not k.startswith(("auto:", "tree:"))]
        return configurations


def describe(engine: str, drafter: str, k: str) -> str:
    """A configuration in words: 'standard', 'lookup, K auto', 'llama-server: qwen2.5-coder:0.5b, K 4'."""
    words = "standard" if drafter == STANDARD else f"{drafter}, K {k}"
    return words if engine == PROJECT else f"{engine}: {words}"


def load_prompts(config: BenchConfig) -> list[dict[str, Any]]:
    prompts = []
    with open(config.prompts_file) as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                prompt = json.loads(line)
                problems = [f"missing {key}" for key in sorted({"id", "category", _shape(prompt)} - set(prompt))]
            except json.JSONDecodeError as error:
                raise ValueError(f"{config.prompts_file}:{number}: not JSON ({error})") from None
            if not problems and "task" in prompt:
                problems = session_problems(prompt)
            problems = problems or think_problems(prompt)
            if problems:
                raise ValueError(f"{config.prompts_file}:{number}: {'; '.join(problems)}")
            prompts.append(prompt)
    if config.categories:
        prompts = [p for p in prompts if p["category"] in config.categories]
    if config.limit:
        kept: list[dict[str, Any]] = []
        for prompt in prompts:
            if sum(p["category"] == prompt["category"] for p in kept) < config.limit:
                kept.append(prompt)
        prompts = kept
    return [turn for prompt in prompts for turn in _turns(prompt)]


def _shape(prompt: dict[str, Any]) -> str:
    """The key that makes a line a conversation (`turns`), an agent session (`task`) or a prompt."""
    return next((key for key in ("turns", "task") if key in prompt), "prompt")


def _turns(prompt: dict[str, Any]) -> list[dict[str, Any]]:
    """A conversation (`turns`: the user's messages) as one prompt per turn, in order, reported by turn
    (category "turn N"), or an agent session as one per step (utils/bench/agents.py); each turn is asked
    after the configuration's own answers to the turns before (`_history`). A plain prompt is itself."""
    if "task" in prompt:
        return session_steps(prompt)
    if "turns" not in prompt:
        return [prompt]
    return [{"id": f"{prompt['id']}/{number}", "category": f"turn {number}", "conversation": prompt["id"],
             "kind": prompt["category"], "turn": number, "prompt": text, "chat": True,
             "said": [{"role": "user", "content": text}],
             **{key: prompt[key] for key in ("max_tokens", "think") if key in prompt}}
            for number, text in enumerate(prompt["turns"], start=1)]


def _history(data: dict[str, Any], prompt: dict[str, Any], repeat: int, configuration: tuple) -> list[dict[str, Any]]:
    """The messages of a conversation turn: what was said before each earlier turn's answer (the
    user's message, or an agent step's tool result) with this configuration's own answers to them
    (from the saved runs, so a resumed benchmark continues the same conversations), then this turn's."""
    earlier = sorted((run for run in data["runs"] if run.get("conversation") == prompt.get("conversation")
                      and (run["repeat"], engine_of(run), run["drafter"], run["k"]) == (repeat, *configuration)
                      and run["turn"] < prompt.get("turn", 0)), key=lambda run: run["turn"])
    messages = [m for run in earlier for m in (*_said(run), _answered(run))]
    return [*messages, *_said(prompt)]


def _answered(run: dict[str, Any]) -> dict[str, Any]:
    """An earlier answer as a client sends it back: its content, and its reasoning as Ollama returned it."""
    reasoning = {"thinking": run["thinking"]} if run.get("thinking") else {}
    return {"role": "assistant", "content": run["text"], **reasoning}


def _said(turn: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages before a turn's answer (a turn saved before `said` existed has its `user` text)."""
    return turn.get("said") or [{"role": "user", "content": turn.get("user", turn.get("prompt"))}]


def _request(config: BenchConfig, prompt: dict[str, Any], messages: list[dict[str, Any]] | None,
             options: dict[str, Any], k: int | None = None) -> GenerationRequest:
    """The project's request for a prompt (a turn: its `messages`, with the session's tools)."""
    return GenerationRequest(prompt=prompt["prompt"], messages=messages, raw=not prompt.get("chat", True),
                             max_tokens=config.max_tokens or prompt.get("max_tokens", 128), options=options, k=k,
                             tools=prompt.get("tools"), think=prompt.get("think"))


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"platform": platform.platform(), "cpu": cpu, "cores": os.cpu_count(),
            "python": platform.python_version()}


def _run_key(run: dict[str, Any]) -> tuple:
    return run["prompt_id"], run["repeat"], engine_of(run), run["drafter"], run["k"]


def _save(path: Path, data: dict[str, Any]) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data, indent=1, ensure_ascii=False))
    os.replace(partial, path)


def _start_anchors(settings: Settings, config: BenchConfig, anchors: dict[tuple[str, str], NativeServer],
                   stopping: threading.Event, target_file: Path | None = None) -> None:
    """One llama-server per native (drafter, K), on the bundled GGUF files of the same model names (the
    target's `target_file` instead, a stand-in's), into
    `anchors`. It runs in a worker thread, which a signal does not interrupt: when the benchmark ends
    meanwhile (`stopping`), it starts no more and stops those it started, the last one included."""
    store = ModelStore(settings.models_dir)

    def model_file(name: str) -> Path:
        if normalize_name(name) not in store.catalogue:
            raise NativeError(f"--native runs llama-server on the bundled model files, and '{name}' is not one "
                              "of them (see: python cli.py models list)")
        if not store.is_installed(name):
            store.install(name)
        store.verify(name)
        return store.path(name)

    binary = server_binary()
    target = target_file or model_file(config.target)
    try:
        for engine, drafter, k in config.configurations():
            if engine != NATIVE or stopping.is_set():
                continue
            draft = model_file(drafter) if drafter != STANDARD and drafter not in model_free_drafters() else None
            anchor = NativeServer(binary, target, speculation_args(drafter, k, draft),
                                  threads=os.cpu_count() or 2, num_ctx=settings.engine.num_ctx or DEFAULT_NUM_CTX)
            anchors[(drafter, k)] = anchor
            anchor.start()
    except BaseException:
        stopping.set()
        raise
    finally:
        if stopping.is_set():
            for anchor in anchors.values():
                anchor.stop()


async def _raw_prompts(target: OllamaClient, config: BenchConfig, settings: Settings,
                       prompts: list[dict[str, Any]]) -> dict[str, str]:
    """The exact text the project's target sees for each prompt, by id, for llama-server's raw
    /completion: a chat prompt through the target's own template."""
    raw = {}
    for prompt in prompts:
        if prompt.get("chat", True):
            raw[prompt["id"]] = await target.render_chat(
                config.target, [{"role": "user", "content": prompt["prompt"]}], settings.engine.context_options(),
                prompt.get("think"))
        else:
            raw[prompt["id"]] = prompt["prompt"]
    return raw


async def _bench(settings: Settings, config: BenchConfig, out_dir: Path, progress: Progress | None) -> dict:
    results_path = out_dir / "results.json"
    prompts = load_prompts(config)
    data: dict[str, Any] = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
                            "machine": machine(), "started": datetime.now(UTC).isoformat(), "runs": []}
    if results_path.exists():
        data = json.loads(results_path.read_text())
    done = {_run_key(run) for run in data["runs"]}
    plan: list[tuple[dict, int, str, str, str]] = []  # (prompt, repeat, engine, drafter, k)
    for repeat in range(config.repeat):
        for number, prompt in enumerate(prompts):
            order = config.configurations()
            if (repeat + number) % 2:
                order = order[::-1]  # alternate who goes first
            plan.extend((prompt, repeat, *configuration) for configuration in order)
    target, _ = servers(settings, config.host)
    data["server"] = {"url": target.url, "version": ".".join(map(str, await target.version())),
                      "embedded": await target.is_embedded(), "in_process": config.in_process}
    stand_in_file = None
    if stand_in(config.target):  # a stand-in thinking model (stand_in.py): made and registered if missing
        stand_in_file = await asyncio.to_thread(ensure, target.url, config.target, settings.data_dir,
                                                settings.models_dir)
    tags = await tags_of(target, config.target, prompts)  # how the server splits its reasoning, if it does
    decoders: dict[tuple[str, int, int], SpeculativeDecoder] = {}  # by (drafter, the longest K, tree width)

    def ceiling(k: str) -> int:  # `auto:N`: the controller chooses up to N
        return int(k[5:]) if k.startswith("auto:") else settings.engine.k_max

    def width(k: str) -> int:  # `tree:W`: the controller's choice, trees of up to W continuations
        return int(k[5:]) if k.startswith("tree:") else settings.engine.tree_width
    anchors: dict[tuple[str, str], NativeServer] = {}
    raw_prompts: dict[str, str] = {}
    loaded = AsyncExitStack()
    try:
        engine_target: Target = target
        if config.in_process:
            engine_target = await loaded.enter_async_context(loaded_here())
        for engine, drafter, k in config.configurations():  # load every model before anything is timed
            if engine == PROJECT and (drafter, ceiling(k), width(k)) not in decoders:
                # Each configuration learns from its own answers only: a memory of its own.
                decoder = await build_decoder(settings.engine.replace(k_max=ceiling(k), tree_width=width(k)),
                                              engine_target, config.target, drafter, memory=EngineMemory())
                decoders[drafter, ceiling(k), width(k)] = decoder
                await collect(decoder, GenerationRequest(prompt="Hello", max_tokens=4, k=2))
        if config.native:
            raw_prompts = await _raw_prompts(target, config, settings, prompts)
            stopping = threading.Event()
            try:
                await asyncio.to_thread(_start_anchors, settings, config, anchors, stopping, stand_in_file)
            except BaseException:  # ended meanwhile (Ctrl-C, kill): the thread stops what it started
                stopping.set()
                raise
            data["native"] = {"anchor": ANCHOR, "commands": {f"{d} k={k}": a.command for (d, k), a in anchors.items()}}
        async with httpx.AsyncClient(timeout=settings.engine.request_timeout) as client:
            for anchor in anchors.values():
                await anchor.complete(client, "Hello", 4, config.temperature, seed=0)
            for index, (prompt, repeat, engine, drafter, k) in enumerate(plan, start=1):
                if (prompt["id"], repeat, engine, drafter, k) in done:
                    continue
                if progress:
                    progress(index - 1, len(plan), f"{prompt['id']}, repeat {repeat + 1}/{config.repeat}: "
                                                   f"{describe(engine, drafter, k)}")
                messages = _history(data, prompt, repeat, (engine, drafter, k)) if "conversation" in prompt else None
                if engine == PROJECT:
                    request = _request(config, prompt, messages,
                                       SamplingOptions(temperature=config.temperature, seed=repeat).to_ollama(),
                                       k=None if k.startswith(("auto", "tree")) else int(k))
                    result = await timed_answer(decoders[drafter, ceiling(k), width(k)], request)
                else:
                    raw = (await target.render_chat(config.target, messages, settings.engine.context_options(),
                                                    prompt.get("think"), prompt.get("tools"))
                           if messages else raw_prompts[prompt["id"]])
                    result = await anchors[(drafter, k)].complete(
                        client, raw, config.max_tokens or prompt.get("max_tokens", 128), config.temperature,
                        seed=repeat)
                    result["thinking"], result["text"] = split(result["text"], raw, tags if thinks(prompt) else None)
                turn = {key: prompt[key] for key in ("conversation", "turn", "kind", "said") if key in prompt}
                category = step_kind(result["text"]) if prompt["category"] == STEP else prompt["category"]
                data["runs"].append({"prompt_id": prompt["id"], "category": category, "repeat": repeat,
                                     "engine": engine, "drafter": drafter, "k": k, "target": config.target,
                                     "text": result["text"], "stats": result["stats"], "finished": time.time(),
                                     **turn, **{key: result[key] for key in ("llama_timings", "phases", "thinking")
                                                 if result.get(key)}})
                _save(results_path, data)
            standard = decoders.get((STANDARD, settings.engine.k_max, settings.engine.tree_width))
            if config.temperature == 0 and standard is not None and "self_consistency" not in data:
                data["self_consistency"] = await _self_consistency(standard, config, prompts, data)
                _save(results_path, data)
        if progress:
            progress(len(plan), len(plan), "done")
    finally:
        for anchor in anchors.values():
            anchor.stop()
        await loaded.aclose()
        await target.aclose()
    return data


async def _self_consistency(standard: Any, config: BenchConfig, prompts: list[dict[str, Any]],
                            data: dict[str, Any]) -> list[dict[str, Any]]:
    """The server against itself: each prompt's greedy standard answer asked once more, with other
    requests between (the whole benchmark, then the other prompts), compared with its first answer.
    The identity of speculative answers can be no better than this: on a server whose rows depend on
    the batch and the cache (llama.cpp's, Ollama included) the same request may answer differently."""
    first = {r["prompt_id"]: r for r in data["runs"]
             if r["repeat"] == 0 and r["engine"] == PROJECT and r["drafter"] == STANDARD}
    pairs = []
    for prompt in prompts:
        if prompt["id"] not in first:
            continue
        messages = _history(data, prompt, 0, (PROJECT, STANDARD, "0")) if "conversation" in prompt else None
        again = await collect(standard, _request(config, prompt, messages, {"temperature": 0}))
        pairs.append({"prompt_id": prompt["id"], "category": prompt["category"],
                      "same": same(again, first[prompt["id"]])})
    return pairs


def run_bench(settings: Settings, config: BenchConfig, progress: Progress | None = None) -> Path:
    """Run (or resume) a benchmark; returns its folder with results.json, report.md and plots."""
    out_dir = config.out_dir or settings.data_dir / "bench" / datetime.now().strftime("%Y%m%d-%H%M%S")
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        data = asyncio.run(_bench(settings, config, out_dir, progress))
    except BaseException:
        if created and not any(out_dir.iterdir()):  # failed before any result (bad prompts, no server):
            out_dir.rmdir()  # no empty folder left in the data folder; one with results stays, to resume
        raise
    write_report(out_dir, data)
    return out_dir


def past_runs(settings: Settings) -> list[Path]:
    root = settings.data_dir / "bench"
    if not root.exists():
        return []
    return sorted((p for p in root.iterdir() if (p / "results.json").exists()), reverse=True)


def load_run(path: Path) -> dict[str, Any]:
    data = json.loads((path / "results.json").read_text())
    report = path / "report.md"
    return {**data, "summary": summarize(data), "report_md": report.read_text() if report.exists() else ""}
