"""Driving the app in Chromium as a person does: open it, change sidebar settings, send a message and
wait for its answer to stream and be saved, read an answer's stats, take a screenshot. Shared by the
browser tests (tests/e2e/conftest.py starts the app and the browser).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Locator, Page, TimeoutError, expect

from tests.support.browser import VIEWPORT

ROOT = Path(__file__).resolve().parents[2]
# Where the screenshots go. A test run must not change tracked files, so by default they land in
# artifacts/tmp/screenshots/ (gitignored). To refresh the pictures the README shows, set
#   SPEC_SCREENSHOTS_DIR=docs/screenshots .venv/bin/python -m pytest tests/e2e -x -q
# (a path relative to the project folder, or an absolute one).
SCREENSHOTS = ROOT / os.environ.get("SPEC_SCREENSHOTS_DIR", "artifacts/tmp/screenshots")

ANSWER_TIMEOUT = 240_000  # ms for one answer (or two on Compare): two shared cores can be slow
NAV_RETRY_MS = 15_000  # a page link after which the browser asked for no run by then is clicked again
RERUN_TIMEOUT = 120_000  # ms for a rerun after a widget change (the sidebar asks the server each time)
MAX_TOKENS = 40
STANDARD_PROMPT = "Name three colours of the rainbow."
SPECULATIVE_PROMPT = "Repeat this sentence exactly: The quick brown fox jumps over the lazy dog."
COMPARE_PROMPT = "Repeat this sentence exactly: Speculative decoding drafts tokens and the target verifies them."
LONG_PROMPT = "Count from 1 to 300, one number per line."
LOOKUP_OPTION = "lookup"
# The accepted draft tokens' HTML (utils/app/highlight.py): a span on DRAFT_COLOUR.
DRAFT_SPAN = 'span[style*="rgba(46, 160, 67, 0.28)"]'
MAX_SCREENSHOT_HEIGHT = 2400
FULL_HEIGHT = """() => Math.max(document.documentElement.scrollHeight, ...[...document.querySelectorAll('*')]
  .filter(e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowY))
  .map(e => e.scrollHeight + e.getBoundingClientRect().top))"""
# True once the page's height and every chart's size are what they were at the last look (polled):
# the charts have redrawn at a new window size, however long that took.
LAYOUT_SETTLED = """() => {
  const now = JSON.stringify([document.documentElement.scrollHeight,
    ...[...document.querySelectorAll('[data-testid="stPlotlyChart"] .main-svg')]
      .map(e => [e.clientWidth, e.clientHeight])]);
  const settled = window.__layout === now;
  window.__layout = now;
  return settled;
}"""
SCROLL_TO_TOP = """() => { for (const e of document.querySelectorAll('*')) if (e.scrollTop) e.scrollTop = 0;
  window.scrollTo(0, 0); }"""
LOADS = "Number(sessionStorage.getItem('loads'))"  # counted by conftest.WATCH_RUNS
SCRIPT_STATE = "document.querySelector('[data-testid=\"stApp\"]')?.getAttribute('data-test-script-state')"

# Watches an answer stream: the partial texts the server sent (counted by browser.WATCH_RUNS from the
# websocket), and, for a failure's message, how many different partial texts the page drew (any
# chat message with the typing cursor: while a run redraws the page, messages of the run before stay
# in place below the one streaming). A busy browser draws several partial texts as one, or none.
WATCH_STREAM = """
() => {
  const seen = new Set();
  window.__stream = {sent: new Set(), partials: 0, drawn: 0};
  new MutationObserver(() => {
    for (const m of document.querySelectorAll('[data-testid="stChatMessage"]'))
      if (m.innerText.includes('\u258c')) seen.add(m.innerText);
    window.__stream.drawn = seen.size;
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}
"""


# -- driving Streamlit ------------------------------------------------------------------------------------


def run_mark(page: Page) -> tuple[int, int, int]:
    """Where the page stands: how many times it has loaded in this tab, the script runs the server
    finished since, and the runs the browser asked it for (browser.WATCH_RUNS)."""
    return tuple(page.evaluate(f"[{LOADS}, window.__runs.completed, window.__runs.asked]"))


def wait_idle(page: Page, mark: tuple[int, ...] = (0, 0, 0), timeout: float = RERUN_TIMEOUT) -> None:
    """Wait until the server has finished a script run since `mark` (taken before the click; a reload
    counts as such), none is under way, and the page has drawn the end of it."""
    loads, completed = mark[:2]
    ran = f"({LOADS} > {loads} ? window.__runs.completed > 0 : window.__runs.completed > {completed})"
    try:
        page.wait_for_function(f"{ran} && !window.__runs.busy && {SCRIPT_STATE} === 'notRunning'", timeout=timeout)
    except TimeoutError:
        now, state = page.evaluate(f"[[{LOADS}, window.__runs.completed, window.__runs.asked], {SCRIPT_STATE}]")
        raise AssertionError(f"no finished script run in {timeout / 1000:.0f} s: (page loads, runs finished, "
                             f"runs asked) went from {tuple(mark)} to {tuple(now)}; script state {state!r}"
                             ) from None


def rerun_after(page: Page, action: Callable[[], None], timeout: float = RERUN_TIMEOUT) -> None:
    """Do something that reruns the script, and wait for that run to finish."""
    mark = run_mark(page)
    action()
    wait_idle(page, mark, timeout)


def open_page(page: Page, name: str) -> None:
    """Go to another page of the app by its sidebar link. A click can be lost (seen once in CI: no
    script run at all in 120 s after it), and going to a page twice is going there once, so a click
    after which the browser has asked the server for no run within NAV_RETRY_MS is made again."""
    link = sidebar(page).get_by_role("link", name=name)
    mark = run_mark(page)
    link.click()
    try:
        page.wait_for_function(f"window.__runs.asked > {mark[2]}", timeout=NAV_RETRY_MS)
    except TimeoutError:  # the click did not arrive
        link.click()
    wait_idle(page, mark)


def open_app(page: Page, url: str) -> None:
    page.goto(url)
    wait_idle(page, timeout=ANSWER_TIMEOUT)  # the first run reads the tokenizers of every model
    expect(sidebar(page).get_by_text("embedded llama.cpp server")).to_be_visible()


def sidebar(page: Page) -> Locator:
    return page.get_by_test_id("stSidebar")


def set_switch(page: Page, label: str, on: bool) -> None:
    switch = sidebar(page).get_by_role("switch", name=label)
    if switch.is_checked() != on:
        rerun_after(page, lambda: sidebar(page).get_by_text(label, exact=True).click())
    expect(switch).to_be_checked(checked=on)


def set_number(page: Page, label: str, value: int) -> None:
    field = sidebar(page).get_by_label(label, exact=True)
    if field.input_value() != str(value):
        def type_value() -> None:
            field.fill(str(value))
            field.press("Enter")
        rerun_after(page, type_value)
    expect(field).to_have_value(str(value))


def choose(page: Page, label: str, option: str) -> None:
    box = sidebar(page).get_by_role("combobox", name=label)
    if box.input_value() != option:
        def pick() -> None:
            box.click()
            page.get_by_role("option", name=option, exact=True).click()
        rerun_after(page, pick)
    expect(box).to_have_value(option)


def open_advanced(page: Page) -> None:
    """Unfold the sidebar's 'Advanced settings' (unfolding runs no script)."""
    expander = sidebar(page).get_by_test_id("stExpander").filter(has_text="Advanced settings")
    if expander.locator("details").get_attribute("open") is None:
        expander.get_by_text("Advanced settings", exact=True).click()
    expect(expander.locator("details")).to_have_attribute("open", "")


def set_draft_length(page: Page, value: str) -> None:
    """The 'Draft length K' select slider (under Advanced settings), moved with the keyboard as a person can."""
    open_advanced(page)
    slider = sidebar(page).get_by_role("slider", name="Draft length K")
    for _ in range(12):
        current = slider.get_attribute("aria-valuetext")
        if current == value:
            return
        key = "ArrowLeft" if current != "auto" and (value == "auto" or int(current) > int(value)) else "ArrowRight"
        rerun_after(page, lambda key=key: slider.press(key))
    raise AssertionError(f"the draft length slider did not reach {value}")


def short_answers(page: Page, speculative: bool) -> None:
    """Sidebar settings for a quick answer. With speculation: prompt lookup and a fixed K, so the first
    answer drafts at once (the adaptive controller would first measure standard speed)."""
    set_number(page, "Max tokens", MAX_TOKENS)
    set_switch(page, "Speculative decoding", speculative)
    drafter = sidebar(page).get_by_role("combobox", name="Drafter")
    if speculative:
        choose(page, "Drafter", LOOKUP_OPTION)
        set_draft_length(page, "4")
    else:
        expect(drafter).to_have_count(0)


def assistant_messages(page: Page) -> Locator:
    return page.get_by_test_id("stChatMessage").filter(has=page.get_by_test_id("stChatMessageAvatarAssistant"))


def start_answer(page: Page, prompt: str) -> Locator:
    """Type a message and send it, the server's stream watched (WATCH_STREAM); the answer's own Stop
    button once it shows (not the header's; while a run is drawn Streamlit may keep a hidden copy)."""
    page.evaluate(WATCH_STREAM)
    box = page.get_by_test_id("stChatInput").locator("textarea")
    box.fill(prompt)
    box.press("Enter")
    stop = page.get_by_test_id("stChatMessage").filter(visible=True).get_by_role("button", name="Stop")
    expect(stop).to_be_visible(timeout=ANSWER_TIMEOUT)
    return stop


def send(page: Page, prompt: str) -> None:
    """Type a message and send it; wait for the answer to stream, be saved and be redrawn."""
    answers_before = assistant_messages(page).count()
    page.evaluate(WATCH_STREAM)
    box = page.get_by_test_id("stChatInput").locator("textarea")
    box.fill(prompt)
    mark = run_mark(page)
    box.press("Enter")
    expect(assistant_messages(page)).to_have_count(answers_before + 1, timeout=ANSWER_TIMEOUT)
    # Done: the saved answer is redrawn with its stats line, and the script is idle.
    expect(assistant_messages(page).last.get_by_test_id("stExpander")).to_have_count(1, timeout=ANSWER_TIMEOUT)
    wait_idle(page, mark, timeout=ANSWER_TIMEOUT)
    assert_streamed(page)


def assert_streamed(page: Page) -> None:
    """The answer since WATCH_STREAM streamed: the server sent at least two different partial texts
    (the cursor alone, then some text) before the whole answer. What the page drew of them is not
    asked: a browser short of CPU draws several as one, or only the finished answer."""
    partials, drawn = page.evaluate("[window.__stream.partials, window.__stream.drawn]")
    assert partials >= 2, f"the answer did not stream: the server sent {partials} partial text(s) ({drawn} drawn)"


def answer_stats(message: Locator) -> dict[str, str]:
    """An answer's figures, read from its opened 'Stats' table (figure: value), with its `mode` and
    `drafter` read from the "how it was made" row (e.g. "speculative, drafter lookup, greedy verification")."""
    expander = message.get_by_test_id("stExpander")
    expander.get_by_text("Stats", exact=True).click()
    table = expander.get_by_test_id("stTable")
    expect(table).to_be_visible()
    rows = [row.split("\t") for row in table.locator("tbody tr").all_inner_texts()]
    figures = {cells[0].strip(): cells[1].strip() for cells in rows if len(cells) >= 2}
    how = figures.get("how it was made", "").split(", ")
    figures["mode"] = how[0]
    for part in how[1:]:
        if part.startswith("drafter "):
            figures["drafter"] = part.removeprefix("drafter ")
    return figures


def screenshot(page: Page, name: str) -> Path:
    """The whole page, sidebar included: Streamlit scrolls inside its own containers, so the window is
    made as tall as the tallest of them (up to MAX_SCREENSHOT_HEIGHT), scrolled to the top, for the picture."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    page.mouse.move(VIEWPORT["width"] - 5, 5)  # no hover effect in the picture
    page.evaluate("document.activeElement?.blur()")  # nor a focus ring
    height = page.evaluate(FULL_HEIGHT)
    page.set_viewport_size({**VIEWPORT, "height": min(max(height, VIEWPORT["height"]), MAX_SCREENSHOT_HEIGHT)})
    page.evaluate(SCROLL_TO_TOP)
    page.wait_for_function(LAYOUT_SETTLED, polling=250, timeout=RERUN_TIMEOUT)  # charts redraw at the new size
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size(VIEWPORT)
    assert path.stat().st_size > 10_000
    return path


def answer_after(page: Page, action: Callable[[], None]) -> None:
    """Click something that asks for a new answer (Regenerate, Send after an edit) and wait until that
    answer has streamed, been saved and been redrawn with its stats, and the script is idle."""
    page.evaluate(WATCH_STREAM)
    rerun_after(page, action, timeout=ANSWER_TIMEOUT)
    last = assistant_messages(page).last
    expect(last.get_by_test_id("stExpander")).to_have_count(1)
    expect(last).not_to_contain_text("\u258c")
    assert_streamed(page)
