"""The benchmark command on a tiny prompt set: results, report, plots, and resuming a broken run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from config import Settings
from tests.support.models import DRAFT, ROOT, SMALL, TARGET
from tests.support.own_server import own_server
from utils.bench.runner import BenchConfig, load_prompts, run_bench

PROMPTS = [
    {"id": "code-1", "category": "code", "prompt": "def add(a, b):", "chat": False, "max_tokens": 8},
    {"id": "chat-1", "category": "chat", "prompt": "Say hello.", "chat": True, "max_tokens": 8},
]


@pytest.fixture
def bench_config(tmp_path, server_url) -> BenchConfig:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    return BenchConfig(prompts_file=prompts, target=SMALL, drafters=["lookup"], out_dir=tmp_path / "run",
                       host=server_url)


def test_results_report_and_plots(bench_config, tmp_path):
    steps = []
    out = run_bench(Settings(data_dir=tmp_path), bench_config, lambda done, total, label: steps.append((done, total)))
    data = json.loads((out / "results.json").read_text())
    assert {"config", "machine", "server", "started", "runs"} <= set(data)
    assert sorted((r["prompt_id"], r["drafter"]) for r in data["runs"]) == [
        ("chat-1", "lookup"), ("chat-1", "none"), ("code-1", "lookup"), ("code-1", "none")]
    for run in data["runs"]:
        assert {"category", "repeat", "k", "target", "text", "stats", "finished"} <= set(run)
        assert run["stats"]["output_tokens"] <= 8 and run["stats"]["tokens_per_second"] > 0
    assert steps[-1] == (4, 4)
    report = (out / "report.md").read_text()
    assert "## code" in report and "## chat" in report and "| lookup | auto |" in report
    for plot in ("speedup", "acceptance_by_position", "tokens_per_second_by_k"):
        assert (out / f"{plot}.html").stat().st_size > 1000


def test_an_interrupted_run_resumes_where_it_stopped(bench_config, tmp_path):
    settings = Settings(data_dir=tmp_path)
    out = run_bench(settings, bench_config)
    results = out / "results.json"
    data = json.loads(results.read_text())
    kept, lost = data["runs"][:3], data["runs"][3]
    results.write_text(json.dumps({**data, "runs": kept}))  # as if it had died before the last run
    run_bench(settings, bench_config)
    resumed = json.loads(results.read_text())["runs"]
    assert resumed[:3] == kept  # finished runs are not redone
    assert (resumed[3]["prompt_id"], resumed[3]["drafter"]) == (lost["prompt_id"], lost["drafter"])
    assert resumed[3]["finished"] > lost["finished"]


def test_a_broken_prompt_file_is_reported_with_its_line(tmp_path):
    prompts = tmp_path / "bad.jsonl"
    prompts.write_text(json.dumps(PROMPTS[0]) + "\n" + '{"id": "x", "prompt": "no category"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: missing category"):
        load_prompts(BenchConfig(prompts_file=prompts, target=SMALL, drafters=["lookup"]))
    data = tmp_path / "data"
    result = subprocess.run([sys.executable, str(ROOT / "cli.py"), "bench", "--prompts", str(prompts),
                             "--target", SMALL, "--draft", "lookup", "--host", "http://127.0.0.1:9"],
                            capture_output=True, text=True, cwd=ROOT, env={**os.environ, "SPEC_DATA_DIR": str(data)})
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error:") and "Traceback" not in result.stderr
    assert not list((data / "bench").iterdir())  # no empty run folder left behind


def test_the_shipped_prompt_set_is_varied_enough():
    prompts = load_prompts(BenchConfig(prompts_file=ROOT / "prompts" / "bench.jsonl", target=SMALL, drafters=[]))
    assert len(prompts) >= 40
    assert {p["category"] for p in prompts} == {"code", "edit", "summarize", "chat"}
    assert len({p["id"] for p in prompts}) == len(prompts)


async def test_the_clairvoyant_ceiling_of_each_model_free_drafter_over_a_conversation(server_url, tmp_path):
    from utils.bench.ceiling import measure

    conversation = {"id": "again", "category": "code-edit", "max_tokens": 24,
                    "turns": ["Write a Python function add(a, b).", "Write exactly the same function again."]}
    prompts_file = tmp_path / "conversation.jsonl"
    prompts_file.write_text(json.dumps(conversation) + "\n")
    prompts = load_prompts(BenchConfig(prompts_file, SMALL, ["lookup"]))
    report = await measure(server_url, SMALL, prompts, ["lookup", "suffix"], k_max=2, repeat=1)
    lookup, suffix = report.split("\n\n")
    assert lookup.startswith(f"{SMALL}, lookup, a clairvoyant controller (K up to 2)")
    assert suffix.startswith(f"{SMALL}, suffix, a clairvoyant controller (K up to 2)")
    for part in (lookup, suffix):  # a row per turn, and medians by turn
        assert "again/1" in part and "again/2" in part and "median, turn 2" in part and "median, all" in part


async def test_the_clairvoyant_ceiling_with_costs_measured_in_process(server_url, tmp_path, monkeypatch):
    """`bench-ceiling --in-process`: a token's and a burst's costs from the embedded server loaded in this
    process (what `bench --in-process` runs the engine on), the answers and drafts as over HTTP."""
    from utils.bench.ceiling import measure
    from utils.embedded.server import load_app

    load_app()
    from utils.embedded.http.target import InProcessTarget

    bursts = []
    next_tokens = InProcessTarget.next_tokens

    async def counted(self, model, prompts, *args, **kwargs):
        bursts.append(len(prompts))
        return await next_tokens(self, model, prompts, *args, **kwargs)

    monkeypatch.setattr(InProcessTarget, "next_tokens", counted)
    prompts_file = tmp_path / "prompts.jsonl"
    prompts_file.write_text(json.dumps(PROMPTS[0]) + "\n")
    prompts = load_prompts(BenchConfig(prompts_file, SMALL, ["lookup"]))
    report = await measure(server_url, SMALL, prompts, ["lookup"], k_max=2, repeat=1, in_process=True)
    assert report.startswith(f"{SMALL}, lookup, a clairvoyant controller (K up to 2); costs (in process): ")
    assert "burst, K=2" in report and "code-1" in report
    assert sorted(set(bursts)) == [2, 3]  # K = 1 and 2 bursts, each a prompt more than its drafts, here


async def test_the_clairvoyant_ceiling_of_a_draft_model_charges_its_drafting(server_url, tmp_path):
    from utils.bench.ceiling import measure

    prompt = {"id": "fib", "category": "code", "prompt": "def fibonacci(n):", "chat": False, "max_tokens": 16}
    prompts_file = tmp_path / "prompts.jsonl"
    prompts_file.write_text(json.dumps(prompt) + "\n")
    prompts = load_prompts(BenchConfig(prompts_file, TARGET, [DRAFT]))
    report = await measure(server_url, TARGET, prompts, [DRAFT], k_max=2, repeat=1)
    head = report.splitlines()[0]
    assert head.startswith(f"{TARGET}, {DRAFT}, a clairvoyant controller (K up to 2)")
    drafting = float(head.rsplit("drafting included: ", 1)[1].split(" ms")[0])
    assert drafting > 0  # the draft model's time per piece, on top of each burst
    assert "fib" in report and "median, all" in report




async def test_the_clairvoyant_ceiling_of_an_agent_session_by_kind_and_whole(server_url, tmp_path):
    """The first two steps of a shipped agent session, as `bench` asks them: each step reported by its
    answer's kind (the first reads the file: a call), and the session whole."""
    from utils.bench.ceiling import measure

    session = json.loads((ROOT / "prompts" / "agents.jsonl").read_text().splitlines()[0])
    prompts_file = tmp_path / "agents.jsonl"
    prompts_file.write_text(json.dumps({**session, "results": session["results"][:1]}) + "\n")
    prompts = load_prompts(BenchConfig(prompts_file, TARGET, ["suffix"]))
    report = await measure(server_url, TARGET, prompts, ["suffix"], k_max=2, repeat=1, max_tokens=16)
    first = next(line for line in report.splitlines() if line.startswith(f"{session['id']}/1 "))
    assert first.endswith("  call") and f"{session['id']}/2 " in report
    assert "median, step " not in report and "median, call " in report
    assert f"session {session['id']} " in report and "sessions: median wall" in report

def test_an_agent_session_step_by_step_reported_by_kind_and_session(server_url, tmp_path):
    """The first two steps of a shipped agent session (the task, then the scripted file after the model's
    own call), on the tools model: each step a kind, answers identical, rows per kind and per session."""
    session = json.loads((ROOT / "prompts" / "agents.jsonl").read_text().splitlines()[0])
    prompts = tmp_path / "agents.jsonl"
    prompts.write_text(json.dumps({**session, "results": session["results"][:1]}) + "\n")
    config = BenchConfig(prompts_file=prompts, target=TARGET, drafters=["lookup"], out_dir=tmp_path / "run",
                         host=server_url, max_tokens=16)
    out = run_bench(Settings(data_dir=tmp_path), config)
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert sorted((r["prompt_id"], r["drafter"]) for r in runs) == [
        (f"{session['id']}/1", "lookup"), (f"{session['id']}/1", "none"),
        (f"{session['id']}/2", "lookup"), (f"{session['id']}/2", "none")]
    step2 = next(r for r in runs if r["turn"] == 2)
    assert step2["said"][0]["role"] == "tool" and step2["said"][0]["tool_name"] == "read_file"
    assert {r["category"] for r in runs} <= {"call", "file write", "final answer"}
    assert {r["category"] for r in runs if r["turn"] == 1} == {"call"}  # the task asks to read the file first
    report = (out / "report.md").read_text()
    assert "## call" in report and "## By kind of turn" in report
    assert f"| project | lookup | auto | {session['id']} | 2 |" in report
    assert "| 2/2 |" in report  # both steps answered as the standard configuration did


def test_a_reasoning_prompt_on_the_stand_in_thinker_the_bench_creates(tmp_path):
    """The reasoning workload's form on the 0.5B stand-in thinking model (utils/bench/stand_in.py), which the
    benchmark creates on its server (a data folder of its own): `think` sent, the reasoning kept apart
    from the answer and identical to the standard run's, both timed, and the report's section on them."""
    prompt = {"id": "add", "category": "function", "think": True, "max_tokens": 96,
              "prompt": "Write a Python function add(a, b) that returns a + b."}
    prompts = tmp_path / "reasoning.jsonl"
    prompts.write_text(json.dumps(prompt) + "\n")
    with own_server(tmp_path, (DRAFT,)) as url:
        config = BenchConfig(prompts_file=prompts, target="stand-in-thinker:0.5b", drafters=["suffix"],
                             out_dir=tmp_path / "run", host=url)
        out = run_bench(Settings(data_dir=tmp_path), config)
        shown = httpx.post(f"{url}/api/show", json={"model": "stand-in-thinker:0.5b"}).json()
        plain = BenchConfig(prompts_file=prompts, target=DRAFT, drafters=["suffix"], out_dir=tmp_path / "plain",
                            host=url)
        with pytest.raises(ValueError, match=rf"the prompts ask to think \(think: true\) and {DRAFT} cannot think; "
                                             "use a thinking model or the stand-in: --target stand-in-thinker:1.5b"):
            run_bench(Settings(data_dir=tmp_path), plain)  # refused before any answer, not with the server's 400s
    assert "thinking" in shown["capabilities"]
    runs = {r["drafter"]: r for r in json.loads((out / "results.json").read_text())["runs"]}
    standard, suffix = runs["none"], runs["suffix"]
    assert standard["thinking"] and "def add" in standard["text"]  # it reasons, then answers
    assert (suffix["thinking"], suffix["text"]) == (standard["thinking"], standard["text"])
    assert suffix["stats"]["mode"] == "speculative"  # the thinking answer speculated, not sent upstream
    reasoning = suffix["stats"]["thinking_tokens"]
    assert 0 < reasoning == standard["stats"]["thinking_tokens"] < suffix["stats"]["output_tokens"]
    for run in (standard, suffix):
        phases = run["phases"]
        assert 0 < phases["thinking_s"] < phases["content_s"] < phases["end_s"]
    report = (out / "report.md").read_text()
    assert "stand-in-thinker:0.5b is a STAND-IN thinking model: qwen2.5-coder:0.5b" in report
    assert "## Reasoning and answer apart" in report and "| project | suffix | auto | function | 1 | 1 |" in report


def test_the_project_engine_in_process_as_cli_serve_speculates(bench_config, tmp_path, monkeypatch):
    """`bench --in-process`: the project's answers come from the embedded server loaded in the bench's own
    process (the target `cli.py serve` speculates on), the same greedy text as the HTTP server's."""
    from utils.embedded.server import load_app

    load_app()
    from utils.embedded.http.target import InProcessTarget

    streams = []
    stream_raw = InProcessTarget.stream_raw

    def counted(self, model, prompt, options, *args, **kwargs):
        streams.append(prompt)
        return stream_raw(self, model, prompt, options, *args, **kwargs)

    monkeypatch.setattr(InProcessTarget, "stream_raw", counted)
    settings = Settings(data_dir=tmp_path)
    over_http = run_bench(settings, bench_config)
    bench_config.out_dir, bench_config.in_process = tmp_path / "in-process", True
    out = run_bench(settings, bench_config)
    data = json.loads((out / "results.json").read_text())
    texts = {(r["prompt_id"], r["drafter"]): r["text"] for r in data["runs"]}
    http_texts = {(r["prompt_id"], r["drafter"]): r["text"]
                  for r in json.loads((over_http / "results.json").read_text())["runs"]}
    assert texts == http_texts and len(texts) == 4
    assert len(streams) >= 4  # every answer, standard and speculative, generated in this process
    assert data["server"]["in_process"] and "loaded in process, as `cli.py serve` speculates" in (
        out / "report.md").read_text()
