"""Issue 44 in a real browser: what a person sees is true. The Benchmarks page runs on the app's own
embedded server (one server, never a second) and draws no speed-up where nothing was drafted; a
copying follow-up on default settings is speculated and shows green; a reload reopens the conversation
in view; a measured baseline shows at once."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.support.browser import RunningApp, child_pids
from tests.support.driving import (
    ANSWER_TIMEOUT,
    LOOKUP_OPTION,
    SCRIPT_STATE,
    choose,
    open_app,
    open_page,
    rerun_after,
    sidebar,
)

# One short answer that has nothing in its prompt to copy: prompt lookup drafts nothing for it.
IDLE_PROMPT = {"id": "idle-01", "category": "idle", "prompt": "Write one sentence about the weather.", "chat": True,
               "max_tokens": 12}


def embedded_servers(app: RunningApp) -> int:
    """How many `cli.py serve` processes the app runs (its children)."""
    commands = [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") for pid in child_pids(app.process.pid)]
    return sum(b"serve" in command for command in commands)


def test_a_benchmark_runs_on_the_apps_server_and_draws_no_speedup_where_nothing_was_drafted(
        page: Page, own_server_app: RunningApp, tmp_path):
    prompts = tmp_path / "idle.jsonl"
    prompts.write_text(json.dumps(IDLE_PROMPT) + "\n")
    open_app(page, own_server_app.url)
    choose(page, "Drafter", LOOKUP_OPTION)  # the Benchmarks page drafts with the sidebar's drafter
    open_page(page, "Benchmarks")
    main = page.get_by_test_id("stMain")
    field = main.get_by_role("textbox", name="Prompt set (JSON lines, relative to the project folder)")
    def give_prompts() -> None:
        field.fill(str(prompts))
        field.press("Enter")

    rerun_after(page, give_prompts)
    expect(main.get_by_text(re.compile(r"^4 answers \(2 configurations"))).to_be_visible()

    # While it runs: one embedded server, the app's own (a second one took 18 s and 3 GB before).
    main.get_by_role("button", name="Run benchmark").click()
    servers = set()
    deadline = time.monotonic() + ANSWER_TIMEOUT / 1000
    page.wait_for_function(f"{SCRIPT_STATE} === 'running'", timeout=ANSWER_TIMEOUT)
    while page.evaluate(SCRIPT_STATE) == "running" and time.monotonic() < deadline:
        servers.add(embedded_servers(own_server_app))
        time.sleep(0.2)
    expect(main.get_by_text(re.compile(r"^Benchmark saved in "))).to_be_visible(timeout=ANSWER_TIMEOUT)
    assert servers == {1}, f"embedded servers seen during the benchmark: {sorted(servers)}"
    [run] = (own_server_app.data_dir / "bench").iterdir()
    data = json.loads((run / "results.json").read_text())
    app_server = sidebar(page).get_by_text(re.compile(r"embedded llama.cpp server at")).inner_text()
    assert data["server"]["url"] in app_server, (data["server"]["url"], app_server)
    speculative = [r for r in data["runs"] if r["drafter"] == LOOKUP_OPTION]
    assert len(speculative) == 2 and sum(r["stats"]["drafted_tokens"] for r in speculative) == 0, \
        "the premise: prompt lookup drafted nothing for this prompt"

    # Nothing drafted: no speed-up bar (the chart is not drawn at all), and the reason, in full, once.
    expect(main.get_by_test_id("stPlotlyChart").filter(has_text="Speed-up over standard generation")
           ).to_have_count(0)
    expect(main.get_by_text("No speed-up drawn for: idle, lookup, K auto: nothing drafted.")).to_have_count(1)
    table = main.get_by_test_id("stDataFrame")
    expect(table).to_contain_text("nothing drafted")
