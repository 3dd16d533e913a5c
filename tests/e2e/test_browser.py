"""The app in a real browser: Playwright drives Debian's Chromium, headless, against `streamlit run app.py`
on the test session's embedded server (see conftest.py here).

A person's path through the app: a chat answer with speculation off and one with it on (streamed, accepted
draft tokens highlighted, stats and a chart), the highlight switched off and on, a reload that keeps the
conversation, and a comparison on the Compare page. Every run saves screenshots of the Chat and Compare
pages under artifacts/tmp/screenshots/ (ignored by git); see SCREENSHOTS_DIR below to refresh the README's.

Run: `.venv/bin/python -m pytest tests/e2e -x -q` (Chromium from `bash scripts/install_browser.sh`).
"""

from __future__ import annotations

import re
import time

import httpx
from playwright.sync_api import Page, expect

from tests.support.browser import TARGET
from tests.support.driving import (
    ANSWER_TIMEOUT,
    DRAFT_SPAN,
    LONG_PROMPT,
    RERUN_TIMEOUT,
    SCRIPT_STATE,
    SPECULATIVE_PROMPT,
    STANDARD_PROMPT,
    answer_stats,
    assistant_messages,
    open_app,
    open_page,
    rerun_after,
    screenshot,
    send,
    set_number,
    set_switch,
    short_answers,
    sidebar,
    start_answer,
)

# An answer with a code line longer than a half-width column (Compare) is wide.
LONG_LINE_PROMPT = ("Repeat this Python line exactly, in a code block: total = compute_the_total_of_all_values("
                    "first_argument_value, second_argument_value, third_argument_value)")

# -- the tests ---------------------------------------------------------------------------------------------


def test_chat_standard_and_speculative_answers_survive_a_reload(page: Page, app_url: str):
    open_app(page, app_url)
    expect(page.get_by_text("No conversations yet")).to_be_visible()
    expect(sidebar(page).get_by_role("combobox", name="Target model")).to_have_value(TARGET)

    # Speculation off: a standard answer, which becomes the speed baseline.
    short_answers(page, speculative=False)
    send(page, STANDARD_PROMPT)
    first = assistant_messages(page).nth(0)  # locators are lazy: name it by position
    expect(first.get_by_test_id("stCaptionContainer")).to_contain_text("standard answer (used as the baseline)")
    expect(first.locator(DRAFT_SPAN)).to_have_count(0)
    assert first.get_by_test_id("stChatMessageContent").inner_text().strip()
    expect(sidebar(page).get_by_text(re.compile(r"Speed-ups are measured against the standard baseline"))
           ).to_be_visible()

    # Speculation on (prompt lookup): streamed, accepted draft tokens on green, stats and a chart.
    short_answers(page, speculative=True)
    send(page, SPECULATIVE_PROMPT)
    expect(page.get_by_test_id("stChatMessage")).to_have_count(4)
    second = assistant_messages(page).nth(1)
    caption = second.get_by_test_id("stCaptionContainer").first
    expect(caption).to_contain_text("speculative (lookup):")
    # A measured figure, saying what it compares: this answer (a first ask: lookup remembers no answer)
    # against the standard answer above, the baseline, at a comparable context length.
    expect(caption).to_contain_text(re.compile(
        r"of drafted tokens accepted · speed-up ×\d+\.\d\d \(this answer's tokens/s\) against the standard baseline "
        r"\d+\.\d tokens/s \(last standard answer in Chat, \d+ tokens, at \d+ tokens of context, [^)]+\): standard "
        r"generation on this server at a comparable context length"))
    highlighted = second.locator(DRAFT_SPAN)
    assert highlighted.count() >= 1, "no accepted draft token is highlighted"
    assert "".join(highlighted.all_inner_texts()).strip()
    chart = second.get_by_test_id("stPlotlyChart")
    expect(chart).to_have_count(1)
    expect(chart.locator(".js-plotly-plot .main-svg").first).to_be_visible()
    expect(chart).to_contain_text("Draft tokens per round")
    expect(chart).to_contain_text("Acceptance by draft position")
    expect(first.get_by_test_id("stPlotlyChart")).to_be_hidden()  # an earlier answer's charts: in its Stats
    spoken = second.get_by_test_id("stHtml").inner_text()  # the answer's text, highlighted
    screenshot(page, "chat.png")
    stats = answer_stats(second)
    assert stats.get("mode") == "speculative" and stats.get("drafter") == "lookup", stats

    # The highlight is a display choice: off shows the same text as Markdown, on brings the spans back.
    set_switch(page, "Highlight accepted draft tokens", False)
    expect(assistant_messages(page).last.locator(DRAFT_SPAN)).to_have_count(0)
    expect(assistant_messages(page).last.get_by_test_id("stChatMessageContent")).to_contain_text(
        spoken.strip().split()[0])
    set_switch(page, "Highlight accepted draft tokens", True)
    expect(assistant_messages(page).last.locator(DRAFT_SPAN).first).to_be_visible()

    # A reload is a new session: the conversation opens again from the database, answers and all.
    rerun_after(page, page.reload, timeout=ANSWER_TIMEOUT)
    # The sidebar lists the conversation, marked as the open one.
    listed = sidebar(page).get_by_role("button", name=STANDARD_PROMPT)
    expect(listed).to_have_attribute("data-testid", "stBaseButton-primary")
    expect(page.get_by_test_id("stChatMessage")).to_have_count(4)
    expect(page.get_by_test_id("stChatMessage").nth(0)).to_contain_text(STANDARD_PROMPT)
    expect(page.get_by_test_id("stChatMessage").nth(2)).to_contain_text(SPECULATIVE_PROMPT)
    reloaded = assistant_messages(page).last
    expect(reloaded.locator(DRAFT_SPAN).first).to_be_visible()
    assert reloaded.get_by_test_id("stHtml").inner_text() == spoken
    expect(reloaded.get_by_test_id("stPlotlyChart")).to_have_count(1)


def test_compare_runs_standard_and_speculative_side_by_side(page: Page, app_url: str):
    open_app(page, app_url)
    open_page(page, "Compare")
    expect(page.get_by_role("heading", name="Compare")).to_be_visible()
    short_answers(page, speculative=True)

    prompt = page.get_by_role("textbox", name="Prompt")
    prompt.fill(LONG_LINE_PROMPT)
    rerun_after(page, lambda: prompt.press("Control+Enter"))
    rerun_after(page, lambda: page.get_by_role("button", name="Run both").click(), timeout=ANSWER_TIMEOUT)

    main = page.get_by_test_id("stMain")
    expect(main.get_by_role("heading", name="Standard", exact=True)).to_be_visible()
    expect(main.get_by_role("heading", name="Speculative (lookup)", exact=True)).to_be_visible()
    expect(main.get_by_text("ran first", exact=True)).to_have_count(1)
    expect(main.get_by_text("ran second", exact=True)).to_have_count(1)
    columns = main.get_by_test_id("stColumn")
    answers = [columns.nth(i).get_by_test_id("stHtml").first.inner_text().strip() for i in (0, 1)]
    assert answers[0] and answers[0] == answers[1], answers
    verdict = main.get_by_text(re.compile(r"^The two texts (are identical|differ)"))
    expect(verdict).to_be_visible()
    # Temperature 0 (the default): greedy, so speculation must not change the text.
    expect(verdict).to_have_text("The two texts are identical.")
    metrics = main.get_by_test_id("stMetric")
    expect(metrics).to_have_count(4)
    expect(metrics.last).to_contain_text("Speed-up")
    expect(metrics.nth(2)).to_contain_text(re.compile(r"\d+\.\d → \d+\.\d"))
    # The headline is the median of the pairs, a figure only where their range leaves out ×1.00 (else "—",
    # the median and range as detail under it); the first pair's speeds are detail too.
    spread = main.get_by_text(re.compile(r"^Speed-up over 3 pairs"))
    expect(spread).to_be_visible()
    median, low, high = (float(x) for x in re.findall(r"×(\d+\.\d\d)", spread.inner_text())[:3])
    expect(metrics.last).to_contain_text("—" if low <= 1.0 <= high else f"×{median:.2f}")
    expect(main.get_by_text(re.compile(r"^First pair \(the texts above\): \d+\.\d → \d+\.\d tokens/s, standard → "
                                       r"speculative, a first ask\."))).to_be_visible()  # lookup remembers no answer

    # Right after the run, no redraw needed: the speculative text with its accepted draft tokens on green,
    # the standard one without; no code line runs past its half-width column (long lines wrap).
    expect(columns.nth(1).locator(DRAFT_SPAN).first).to_be_visible()
    expect(columns.nth(0).locator(DRAFT_SPAN)).to_have_count(0)
    for column in (columns.nth(0), columns.nth(1)):
        block = column.locator("pre").first
        expect(block).to_contain_text("compute_the_total")
        assert block.evaluate("e => e.scrollWidth <= e.clientWidth"), "a code line is cut off in its column"
    screenshot(page, "compare.png")


def test_stop_keeps_the_partial_answer_and_the_input_waits(page: Page, app_url: str, server_url: str):
    open_app(page, app_url)
    set_number(page, "Max tokens", 400)
    set_switch(page, "Speculative decoding", False)
    answers_before = assistant_messages(page).count()
    # While it streams: a Stop button, and an input that takes nothing (so nothing typed is lost).
    stop = start_answer(page, LONG_PROMPT)
    box = page.get_by_test_id("stChatInput").locator("textarea")
    page.wait_for_function("window.__stream.partials >= 3", timeout=ANSWER_TIMEOUT)
    expect(box).to_be_disabled()
    stop.click()

    # Stopped: the partial answer stays, marked, and the input is back.
    stopped = assistant_messages(page).last
    expect(stopped).to_contain_text(re.compile(r"Stopped (after \d+ tokens|early): the partial answer is kept\."),
                                    timeout=RERUN_TIMEOUT)
    page.wait_for_function(f"{SCRIPT_STATE} === 'notRunning'", timeout=RERUN_TIMEOUT)
    expect(assistant_messages(page)).to_have_count(answers_before + 1)
    partial = stopped.get_by_test_id("stChatMessageContent").inner_text()
    assert "1" in partial and "▌" not in partial
    expect(stop).to_have_count(0)
    expect(box).to_be_enabled()
    # The server stopped the answer too: an unload waits for the answers still running, so the model
    # leaves at once only if nothing runs (400 tokens take well over 10 s on this CPU). The next test
    # loads it again.
    httpx.post(f"{server_url}/api/generate", json={"model": TARGET, "keep_alive": 0}, timeout=30)
    deadline = time.monotonic() + 10
    while (loaded := [m["name"] for m in httpx.get(f"{server_url}/api/ps", timeout=30).json()["models"]]) \
            and TARGET in loaded and time.monotonic() < deadline:
        time.sleep(0.1)
    assert TARGET not in loaded, "the answer still ran after Stop: the model could not be unloaded"

    # It was saved so: a reload shows it again.
    rerun_after(page, page.reload, timeout=ANSWER_TIMEOUT)
    expect(assistant_messages(page).last).to_contain_text("the partial answer is kept")
