"""Compare in a browser, issue 52: on a fresh data folder, a prompt asked for the first time gives the
headline its first-ask figure; asked again, suffix decoding copies its earlier answer, and that pair is
shown as "asked again", apart, never as a first ask. One pair each, short answers, the small model."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.support.driving import (
    ANSWER_TIMEOUT,
    choose,
    open_app,
    open_page,
    rerun_after,
    set_draft_length,
    set_number,
    set_switch,
)

# A prompt no other test asks (the session's server is shared, and its suffix drafter remembers answers),
# whose answer copies the prompt: suffix drafts on its first ask too, so that ask has a figure.
PROMPT = "Repeat exactly, on one line: red green blue cyan magenta yellow black white (first-ask test)."


def run_compare(page: Page) -> None:
    rerun_after(page, lambda: page.get_by_role("button", name="Run both").click(), timeout=ANSWER_TIMEOUT)
    expect(page.get_by_test_id("stMain").get_by_text(re.compile(r"^The two texts (are identical|differ)"))
           ).to_be_visible()


def test_compare_shows_a_first_ask_as_the_headline_and_a_repeat_apart(page: Page, app_url: str):
    open_app(page, app_url)
    set_number(page, "Max tokens", 24)
    set_switch(page, "Speculative decoding", True)
    choose(page, "Drafter", "suffix")
    set_draft_length(page, "4")  # drafts from the first token (the adaptive controller would measure first)
    open_page(page, "Compare")
    prompt = page.get_by_role("textbox", name="Prompt")
    prompt.fill(PROMPT)
    rerun_after(page, lambda: prompt.press("Control+Enter"))
    pairs = page.get_by_role("spinbutton", name="Pairs")
    pairs.fill("1")
    rerun_after(page, lambda: pairs.press("Enter"))

    main = page.get_by_test_id("stMain")
    run_compare(page)
    headline = main.get_by_test_id("stMetric").last
    expect(headline).to_contain_text("Speed-up, first ask")
    expect(headline).to_contain_text(re.compile(r"×\d+\.\d\d"))
    expect(main.get_by_text(re.compile(r"^First ask ×\d+\.\d\d \(1 pair\): standard against speculative on this "
                                       r"prompt asked for the first time"))).to_be_visible()
    expect(main.get_by_text(re.compile(r"^Asked again"))).to_have_count(0)

    run_compare(page)  # the same prompt: suffix has its answer now
    expect(main.get_by_text(re.compile(r"^Asked again ×\d+\.\d\d \(1 pair, median\): the same prompt asked again"))
           ).to_be_visible()
    expect(headline).to_contain_text("—")  # no first ask in this run: a repeat is never the headline
    expect(main.get_by_text(re.compile(r"^First ask: none in this run\. suffix answered this prompt before in this "
                                       r"app \(its first ask: ×\d+\.\d\d, 1 pair\)"))).to_be_visible()
