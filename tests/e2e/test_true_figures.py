"""Issue 44 in a real browser: what a person sees is true. The Benchmarks page runs on the app's own
embedded server (one server, never a second) and draws no speed-up where nothing was drafted; a
copying follow-up on default settings is speculated and shows green; a measured baseline shows at
once, an answer cut at Max tokens says so, and a reload reopens the conversation in view."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import RunningApp, child_pids, running_app
from tests.support.driving import (
    ANSWER_TIMEOUT,
    DRAFT_SPAN,
    LONG_PROMPT,
    LOOKUP_OPTION,
    SCRIPT_STATE,
    assistant_messages,
    choose,
    open_app,
    open_page,
    rerun_after,
    screenshot,
    send,
    set_number,
    sidebar,
)
from tests.support.models import SMALL, TARGET
from utils.app.store import ConversationStore

# One short answer that has nothing in its prompt to copy: prompt lookup drafts nothing for it.
IDLE_PROMPT = {"id": "idle-01", "category": "idle", "prompt": "Write one sentence about the weather.", "chat": True,
               "max_tokens": 12}


# The conversation: a function, then a follow-up whose answer copies it.
FIB = "Write a Python function that returns the n-th Fibonacci number."
RENAME = "Rename the function to fib and show the whole function again."
EARLIER = "Name a pasta shape."


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
    # The sidebar names the server with the version it reports (3bba45f): "… embedded llama.cpp server
    # (version 0.32.15) at http://…".
    app_server = sidebar(page).get_by_text(re.compile(r"embedded llama.cpp server \(version [^)]+\) at")).inner_text()
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


def with_earlier_conversation(data_dir: Path) -> Path:
    """A data folder holding one conversation from before, soon not the most recent one."""
    earlier = ConversationStore(data_dir / "conversations.sqlite3")
    conversation = earlier.create(EARLIER)
    earlier.add_message(conversation, "user", EARLIER)
    earlier.add_message(conversation, "assistant", "Fusilli.")
    return data_dir


@pytest.fixture
def qwen_app(server_url: str, tmp_path_factory) -> Iterator[RunningApp]:
    """The app as the issue found it: target qwen2.5-coder:1.5b, on a server that also has its draft model
    qwen2.5-coder:0.5b, and default settings."""
    with running_app(tmp_path_factory.mktemp("e2e-qwen"), OLLAMA_HOST=server_url, SPEC_TARGET_MODEL=TARGET) as app:
        yield app


@pytest.fixture
def small_app(server_url: str, tmp_path_factory) -> Iterator[RunningApp]:
    """The app on the test server with the smallest model as target, and a conversation from before."""
    data_dir = with_earlier_conversation(tmp_path_factory.mktemp("e2e-small"))
    with running_app(data_dir, OLLAMA_HOST=server_url, SPEC_TARGET_MODEL=SMALL) as app:
        yield app


def test_a_copying_follow_up_on_default_settings_shows_green(page: Page, qwen_app: RunningApp):
    """The issue's path: on the configured draft model (the old default) the first answer wrote drafting
    off and the follow-up went standard, with no green."""
    open_app(page, qwen_app.url)
    # Default settings: the drafter is what `cli.py serve` pairs the model with; shorter answers only.
    expect(sidebar(page).get_by_role("combobox", name="Drafter")).to_have_value("suffix")
    set_number(page, "Max tokens", 160)
    send(page, FIB)
    send(page, RENAME)
    follow_up = assistant_messages(page).last
    expect(follow_up.get_by_test_id("stCaptionContainer").first).to_contain_text("speculative (suffix):")
    expect(follow_up.locator(DRAFT_SPAN).first).to_be_visible()  # it copied the function: on green
    assert len("".join(follow_up.locator(DRAFT_SPAN).all_inner_texts()).strip()) >= 20
    screenshot(page, "chat-follow-up.png")  # the README's picture (SPEC_SCREENSHOTS_DIR=docs/screenshots)


def test_baseline_at_once_a_note_at_max_tokens_and_a_reload_keeps_the_conversation(page: Page, small_app: RunningApp):
    open_app(page, small_app.url)
    # The baseline shows as soon as it is measured (it said "no baseline measured yet" until the next click).
    no_baseline = sidebar(page).get_by_text(re.compile(r"no baseline measured yet"))
    expect(no_baseline).to_be_visible()
    rerun_after(page, lambda: sidebar(page).get_by_role("button", name="Measure baseline").click(),
                timeout=ANSWER_TIMEOUT)
    expect(sidebar(page).get_by_text(re.compile(r"^Speed-ups are measured against the standard baseline"))
           ).to_be_visible()
    expect(no_baseline).to_have_count(0)

    # An answer cut at Max tokens says so under it.
    set_number(page, "Max tokens", 12)
    rerun_after(page, lambda: sidebar(page).get_by_role("button", name="New conversation").click())
    send(page, LONG_PROMPT)
    expect(assistant_messages(page).last).to_contain_text(
        "The answer stopped at Max tokens (12), perhaps mid-sentence: raise Max tokens in the sidebar")

    # A reload reopens the conversation in view, not the most recent one (the one just asked).
    rerun_after(page, lambda: sidebar(page).get_by_role("button", name=EARLIER).click())
    rerun_after(page, page.reload, timeout=ANSWER_TIMEOUT)
    expect(sidebar(page).get_by_role("button", name=EARLIER)).to_have_attribute("data-testid", "stBaseButton-primary")
    expect(page.get_by_test_id("stChatMessage")).to_have_count(2)
    expect(page.get_by_test_id("stChatMessage").first).to_contain_text(EARLIER)
