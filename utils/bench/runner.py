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

With `native`, llama.cpp's own llama-server (utils/native.py) answers the same prompts too, plainly
and with its own speculative decoding, interleaved with the rest; its speed-up is measured against
its own plain decoding, so the report shows both engines' speed-ups on the same machine and prompts.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx

from config import Settings
from utils.engine.answer import collect
from utils.hosts import servers
from utils.engine.client import OllamaServer
from utils.embedded.models import ModelStore, normalize_name
from utils.bench.native import ANCHOR, NativeError, NativeServer, server_binary, speculation_args
from utils.engine.pairs import LOOKUP, build_decoder
from utils.engine.pairs import NONE as STANDARD
from utils.engine.request import GenerationRequest

Progress = Callable[[int, int, str], None]
PROJECT, NATIVE = "project", "llama.cpp"  # the engines a run can come from


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

    def configurations(self) -> list[tuple[str, str, str]]:
        """(engine, drafter, k) triples, each engine's standard first."""
        speculative = [(d, k) for d in self.drafters if d != STANDARD for k in self.ks]
        configurations = [(PROJECT, STANDARD, "0")] + [(PROJECT, d, k) for d, k in speculative]
        if self.native:  # K = 0 would be llama-server's plain decoding again
            configurations += [(NATIVE, STANDARD, "0")] + [(NATIVE, d, k) for d, k in speculative if k != "0"]
        return configurations


def load_prompts(config: BenchConfig) -> list[dict[str, Any]]:
    prompts = []
    with open(config.prompts_file) as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                prompt = json.loads(line)
                missing = {"id", "category", "prompt"} - set(prompt)
            except json.JSONDecodeError as error:
                raise ValueError(f"{config.prompts_file}:{number}: not JSON ({error})") from None
            if missing:
                raise ValueError(f"{config.prompts_file}:{number}: missing {', '.join(sorted(missing))}")
            prompts.append(prompt)
    if config.categories:
        prompts = [p for p in prompts if p["category"] in config.categories]
    if config.limit:
        kept: list[dict[str, Any]] = []
        for prompt in prompts:
            if sum(p["category"] == prompt["category"] for p in kept) < config.limit:
                kept.append(prompt)
        prompts = kept
    return prompts


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"platform": platform.platform(), "cpu": cpu, "cores": os.cpu_count(),
            "python": platform.python_version()}


def _engine(run: dict[str, Any]) -> str:
    return run.get("engine", PROJECT)  # results.json from before the anchor existed has no engine


def _plain_runs(data: dict[str, Any]) -> dict[tuple, dict[str, Any]]:
    """Each engine's standard runs, by (engine, prompt id, repeat)."""
    return {(_engine(r), r["prompt_id"], r["repeat"]): r for r in data["runs"] if r["drafter"] == STANDARD}


def _run_key(run: dict[str, Any]) -> tuple:
    return run["prompt_id"], run["repeat"], _engine(run), run["drafter"], run["k"]


def _save(path: Path, data: dict[str, Any]) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data, indent=1, ensure_ascii=False))
    os.replace(partial, path)


def _start_anchors(settings: Settings, config: BenchConfig) -> dict[tuple[str, str], NativeServer]:
    """One llama-server per native (drafter, K), on the bundled GGUF files of the same model names."""
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
    target = model_file(config.target)
    anchors: dict[tuple[str, str], NativeServer] = {}
    try:
        for engine, drafter, k in config.configurations():
            if engine != NATIVE:
                continue
            draft = model_file(drafter) if drafter not in (STANDARD, LOOKUP) else None
            anchor = NativeServer(binary, target, speculation_args(drafter, k, draft),
                                  threads=os.cpu_count() or 2, num_ctx=settings.num_ctx)
            anchors[(drafter, k)] = anchor
            anchor.start()
    except BaseException:
        for anchor in anchors.values():
            anchor.stop()
        raise
    return anchors


async def _raw_prompts(target: OllamaServer, config: BenchConfig, settings: Settings,
                       prompts: list[dict[str, Any]]) -> dict[str, str]:
    """The exact text the project's target sees for each prompt, by id, for llama-server's raw
    /completion: a chat prompt through the target's own template."""
    raw = {}
    for prompt in prompts:
        if prompt.get("chat", True):
            raw[prompt["id"]] = await target.render_chat(
                config.target, [{"role": "user", "content": prompt["prompt"]}], settings.num_ctx)
        else:
            raw[prompt["id"]] = prompt["prompt"]
    return raw


async def _bench(settings: Settings, config: BenchConfig, out_dir: Path, progress: Progress | None) -> dict:
    results_path = out_dir / "results.json"
    prompts = load_prompts(config)
    data: dict[str, Any] = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
                            "machine": machine(), "started": datetime.now(timezone.utc).isoformat(), "runs": []}
    if results_path.exists():
        data = json.loads(results_path.read_text())
    done = {_run_key(run) for run in data["runs"]}
    plan = []
    for repeat in range(config.repeat):
        for number, prompt in enumerate(prompts):
            order = config.configurations()
            if (repeat + number) % 2:
                order = order[::-1]  # alternate who goes first
            plan.extend((prompt, repeat, *configuration) for configuration in order)
    target, _ = servers(settings, config.host)
    data["server"] = {"url": target.url, "version": ".".join(map(str, await target.version())),
                      "embedded": await target.is_embedded()}
    decoders = {}
    anchors: dict[tuple[str, str], NativeServer] = {}
    raw_prompts: dict[str, str] = {}
    try:
        for engine, drafter, _ in config.configurations():  # load every model before anything is timed
            if engine == PROJECT and drafter not in decoders:
                decoders[drafter] = await build_decoder(settings, target, config.target, drafter)
                await collect(decoders[drafter], GenerationRequest(prompt="Hello", max_tokens=4, k=2))
        if config.native:
            raw_prompts = await _raw_prompts(target, config, settings, prompts)
            anchors = await asyncio.to_thread(_start_anchors, settings, config)
            data["native"] = {"anchor": ANCHOR, "commands": {f"{d} k={k}": a.command for (d, k), a in anchors.items()}}
        async with httpx.AsyncClient(timeout=settings.request_timeout) as client:
            for anchor in anchors.values():
                await anchor.complete(client, "Hello", 4, config.temperature, seed=0)
            for index, (prompt, repeat, engine, drafter, k) in enumerate(plan, start=1):
                if (prompt["id"], repeat, engine, drafter, k) in done:
                    continue
                if progress:
                    engine_label = "" if engine == PROJECT else f"{engine}:"
                    progress(index - 1, len(plan), f"{prompt['id']} #{repeat + 1} {engine_label}{drafter} k={k}")
                max_tokens = config.max_tokens or prompt.get("max_tokens", 128)
                if engine == PROJECT:
                    request = GenerationRequest(
                        prompt=prompt["prompt"], raw=not prompt.get("chat", True), max_tokens=max_tokens,
                        temperature=config.temperature, seed=repeat, k=None if k == "auto" else int(k),
                    )
                    result = await collect(decoders[drafter], request)
                else:
                    result = await anchors[(drafter, k)].complete(client, raw_prompts[prompt["id"]], max_tokens,
                                                                  config.temperature, seed=repeat)
                data["runs"].append({"prompt_id": prompt["id"], "category": prompt["category"], "repeat": repeat,
                                     "engine": engine, "drafter": drafter, "k": k, "target": config.target,
                                     "text": result["text"], "stats": result["stats"], "finished": time.time()})
                _save(results_path, data)
        if progress:
            progress(len(plan), len(plan), "done")
    finally:
        for anchor in anchors.values():
            anchor.stop()
        await target.aclose()
    return data


def run_bench(settings: Settings, config: BenchConfig, progress: Progress | None = None) -> Path:
    """Run (or resume) a benchmark; returns its folder with results.json, report.md and plots."""
    out_dir = config.out_dir or settings.data_dir / "bench" / datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    data = asyncio.run(_bench(settings, config, out_dir, progress))
    write_report(out_dir, data)
    return out_dir


# -- analysis -----------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"), float("nan"))
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def summarize(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per category and configuration (and one 'all' row per configuration).

    Each engine's speculative runs are compared with that engine's own standard runs."""
    standard = _plain_runs(data)
    rows = []
    configurations = sorted({(_engine(r), r["drafter"], r["k"]) for r in data["runs"] if r["drafter"] != STANDARD},
                            key=lambda c: (c[0] != PROJECT, c))
    categories = sorted({r["category"] for r in data["runs"]}) + ["all"]
    for engine, drafter, k in configurations:
        for category in categories:
            runs = [r for r in data["runs"] if (_engine(r), r["drafter"], r["k"]) == (engine, drafter, k)
                    and (category == "all" or r["category"] == category)
                    and (engine, r["prompt_id"], r["repeat"]) in standard]
            if not runs:
                continue
            pairs = [(standard[(engine, r["prompt_id"], r["repeat"])], r) for r in runs]
            speedups = [s["stats"]["tokens_per_second"] and r["stats"]["tokens_per_second"] / s["stats"]["tokens_per_second"]
                        for s, r in pairs]
            drafted = sum(r["stats"]["drafted_tokens"] for r in runs)
            accepted = sum(r["stats"]["accepted_tokens"] for r in runs)
            drafts = sum(r["stats"]["drafts"] for r in runs)
            spec_rounds = [x for r in runs for x in r["stats"]["rounds"] if x["k"] > 0 and x["drafted"] > 0]
            std_seconds_per_token = _median([
                s["stats"]["standard_seconds"] / s["stats"]["output_tokens"] for s, _ in pairs if s["stats"]["output_tokens"]
            ])
            bound = float("nan")
            if spec_rounds:
                tokens_per_second = sum(x["emitted"] for x in spec_rounds) / sum(x["seconds"] for x in spec_rounds)
                bound = tokens_per_second * std_seconds_per_token
            low, high = _quartiles(speedups)
            speedup = _median(speedups)
            rows.append({
                "category": category, "engine": engine, "drafter": drafter, "k": k, "runs": len(runs),
                "standard_tps": _median([s["stats"]["tokens_per_second"] for s, _ in pairs]),
                "speculative_tps": _median([r["stats"]["tokens_per_second"] for r in runs]),
                "speedup": speedup, "speedup_p25": low, "speedup_p75": high,
                "drafted": drafted, "acceptance": accepted / drafted if drafted else 0.0,
                "mean_acceptance_length": 1 + accepted / drafts if drafts else 0.0,
                "identical_rate": sum(s["text"] == r["text"] for s, r in pairs) / len(pairs),
                "bound": bound, "of_bound": speedup / bound if bound and bound == bound else float("nan"),
                "mean_k": statistics.fmean([k for r in runs for k in r["stats"]["k_history"]] or [0]),
            })
    return rows


def plain_decoding(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per category (and 'all'): the project's standard generation against llama.cpp's plain decoding
    of the same prompts and repeats. Empty without a native run."""
    plain = _plain_runs(data)
    pairs = [(r, plain[(NATIVE, r["prompt_id"], r["repeat"])]) for (engine, *_), r in plain.items()
             if engine == PROJECT and (NATIVE, r["prompt_id"], r["repeat"]) in plain]
    rows = []
    for category in sorted({p["category"] for p, _ in pairs}) + ["all"]:
        mine = [(p, n) for p, n in pairs if category == "all" or p["category"] == category]
        if mine:
            rows.append({
                "category": category, "runs": len(mine),
                "project_tps": _median([p["stats"]["tokens_per_second"] for p, _ in mine]),
                "native_tps": _median([n["stats"]["tokens_per_second"] for _, n in mine]),
                "identical_rate": sum(p["text"] == n["text"] for p, n in mine) / len(mine),
            })
    return rows


def _number(value: float, form: str = "{:.2f}") -> str:
    return "-" if value != value or not value else form.format(value)  # nan or 0: not measured


def report_markdown(data: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    config, host = data["config"], data.get("server", {})
    lines = [
        f"# Benchmark: {config['target']}",
        "",
        f"- Machine: {data['machine'].get('cpu') or data['machine']['platform']}, {data['machine']['cores']} cores",
        f"- Server: {host.get('url', '?')} (Ollama API {host.get('version', '?')}"
        f"{', embedded llama.cpp' if host.get('embedded') else ''})",
        f"- Prompts: {config['prompts_file']}, repeats: {config['repeat']}, temperature {config['temperature']}",
        f"- Runs: {len(data['runs'])}, started {data['started']}",
    ]
    if "native" in data:
        lines.append(f"- Anchor: llama-server from {data['native']['anchor']}, weight repacking on; "
                     "its rows compare its speculative decoding with its own plain decoding")
    lines += [
        "",
        "Speed-up: median of speculative / standard tokens/s over the same prompts and repeats (p25-p75).",
        "Bound: the speed-up the measured speculative rounds allow (tokens per round / round time x standard "
        "time per token). Identical: greedy answers equal to the same engine's standard answer.",
        "",
    ]
    for category in sorted({r["category"] for r in rows}, key=lambda c: (c == "all", c)):
        lines += [f"## {category}", "",
                  "| engine | drafter | K | standard tok/s | speculative tok/s | speed-up (p25-p75) | acceptance | "
                  "mean acc. length | mean K | bound | of bound | identical |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in (r for r in rows if r["category"] == category):
            lines.append(
                f"| {r['engine']} | {r['drafter']} | {r['k']} | {r['standard_tps']:.1f} | {r['speculative_tps']:.1f} | "
                f"{r['speedup']:.2f}x ({r['speedup_p25']:.2f}-{r['speedup_p75']:.2f}) | "
                f"{format(r['acceptance'], '.0%') if r['drafted'] else '-'} | "
                f"{_number(r['mean_acceptance_length'])} | {_number(r['mean_k'], '{:.1f}')} | "
                f"{_number(r['bound'], '{:.2f}x')} | {_number(r['of_bound'], '{:.0%}')} | {r['identical_rate']:.0%} |"
            )
        lines.append("")
    plain = plain_decoding(data)
    if plain:
        lines += ["## Plain decoding: the project's standard generation against llama-server", "",
                  "| category | runs | project tok/s | llama.cpp tok/s | project / llama.cpp | identical |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['category']} | {r['runs']} | {r['project_tps']:.1f} | {r['native_tps']:.1f} | "
                  f"{r['project_tps'] / r['native_tps']:.2f}x | {r['identical_rate']:.0%} |" for r in plain]
        lines.append("")
    return "\n".join(lines)


def figures(data: dict[str, Any]) -> dict[str, Any]:
    """Plotly figures: speed-up per category and drafter, acceptance by position, tokens/s against K."""
    import plotly.graph_objects as go

    rows = [r for r in summarize(data) if r["category"] != "all"]
    speedup = go.Figure()
    for engine, drafter, k in dict.fromkeys((r["engine"], r["drafter"], r["k"]) for r in rows):
        mine = [r for r in rows if (r["engine"], r["drafter"], r["k"]) == (engine, drafter, k)]
        label = f"{drafter} k={k}" if engine == PROJECT else f"{engine} {drafter} k={k}"
        speedup.add_bar(name=label, x=[r["category"] for r in mine], y=[r["speedup"] for r in mine],
                        error_y={"type": "data", "symmetric": False,
                                 "array": [r["speedup_p75"] - r["speedup"] for r in mine],
                                 "arrayminus": [r["speedup"] - r["speedup_p25"] for r in mine]})
    speedup.add_hline(y=1.0, line_dash="dot")
    speedup.update_layout(title="Speed-up over standard generation", yaxis_title="x standard", barmode="group")

    # llama-server reports no per-draft detail: the other two plots show the project's runs only.
    project = [r for r in data["runs"] if _engine(r) == PROJECT]
    acceptance = go.Figure()
    for drafter in sorted({r["drafter"] for r in project if r["drafter"] != STANDARD}):
        rounds = [x for r in project if r["drafter"] == drafter for x in r["stats"]["rounds"] if x["drafted"]]
        longest = max((x["drafted"] for x in rounds), default=0)
        rates = []
        for position in range(longest):
            reached = [x for x in rounds if x["drafted"] > position and x["accepted"] >= position]
            rates.append(sum(x["accepted"] > position for x in reached) / len(reached) if reached else None)
        acceptance.add_scatter(name=drafter, x=list(range(1, longest + 1)), y=rates, mode="lines+markers")
    acceptance.update_layout(title="Acceptance by draft position", xaxis_title="position", yaxis_title="accepted",
                             yaxis_range=[0, 1.05])

    by_k = go.Figure()
    for drafter in sorted({r["drafter"] for r in project if r["drafter"] != STANDARD}):
        runs = [r for r in project if r["drafter"] == drafter]
        by_k.add_scatter(name=drafter, mode="markers",
                         x=[statistics.fmean(r["stats"]["k_history"] or [0]) for r in runs],
                         y=[r["stats"]["tokens_per_second"] for r in runs])
    standard = [r["stats"]["tokens_per_second"] for r in project if r["drafter"] == STANDARD]
    if standard:
        by_k.add_hline(y=_median(standard), line_dash="dot", annotation_text="standard (median)")
    by_k.update_layout(title="Tokens/s against draft length", xaxis_title="mean K of the answer",
                       yaxis_title="tokens/s")
    return {"speedup": speedup, "acceptance_by_position": acceptance, "tokens_per_second_by_k": by_k}


def write_report(out_dir: Path, data: dict[str, Any]) -> None:
    rows = summarize(data)
    (out_dir / "report.md").write_text(report_markdown(data, rows))
    for name, figure in figures(data).items():
        figure.write_html(out_dir / f"{name}.html", include_plotlyjs="directory")


def past_runs(settings: Settings) -> list[Path]:
    root = settings.data_dir / "bench"
    if not root.exists():
        return []
    return sorted((p for p in root.iterdir() if (p / "results.json").exists()), reverse=True)


def load_run(path: Path) -> dict[str, Any]:
    data = json.loads((path / "results.json").read_text())
    report = path / "report.md"
    return {**data, "summary": summarize(data), "report_md": report.read_text() if report.exists() else ""}
