"""The first screen a new user sees, in a real browser on the app with its own server and the smallest
model: what the app does and what green means, example prompts that answer when clicked, and the
advanced settings folded away; the code the answer gives back rendered as a code block with the accepted
draft text highlighted inside it."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.support.browser import RunningApp
from tests.support.driving import (
    DRAFT_SPAN,
    answer_after,
    answer_stats,
    assistant_messages,
    open_advanced,
    open_app,
    rerun_after,
    set_draft_length,
    set_number,
    sidebar,
)
from utils.app.examples import EXAMPLES
from utils.app.store import ConversationStore


def test_an_example_prompt_answers_with_its_drafter(page: Page, own_server_app: RunningApp):
    open_app(page, own_server_app.url)
    main = page.get_by_test_id("stMainBlockContainer")
    expect(main).to_contain_text("text on green is draft text the target accepted")
    # Folded away: the sampling and drafting details.
    expect(sidebar(page).get_by_text("Temperature", exact=True)).to_be_hidden()
    open_advanced(page)
    expect(sidebar(page).get_by_text("Temperature", exact=True)).to_be_visible()

    # Start from standard generation: the example turns speculation on and picks prompt lookup for its
    # answer, then gives the user's settings back.
    set_number(page, "Max tokens", 96)
    # A fixed K drafts from the first token; "auto" measures standard speed first and, with a target as
    # fast as smollm2:135m on two cores, may find drafting does not pay within so short an answer.
    set_draft_length(page, "4")
    if sidebar(page).get_by_role("switch", name="Speculative decoding").is_checked():
        rerun_after(page, lambda: sidebar(page).get_by_text("Speculative decoding", exact=True).click())
    rerun_after(page, lambda: sidebar(page).get_by_role("button", name="New conversation").click())
    edit, complete = (main.get_by_role("button", name=example.label) for example in EXAMPLES)
    expect(complete).to_be_disabled()  # this app's server has only smollm2:135m
    expect(main).to_contain_text("qwen2.5-coder:1.5b ← qwen2.5-coder:0.5b (not installed)")

    expect(main).to_contain_text("your target ← lookup")  # which drafter each example uses
    answer_after(page, edit.click)
    # The example answered with prompt lookup (its stats, below); then the user's own settings came back:
    # standard generation, as chosen before the click.
    expect(sidebar(page).get_by_role("switch", name="Speculative decoding")).not_to_be_checked()
    expect(sidebar(page).get_by_role("combobox", name="Drafter")).to_have_count(0)
    expect(page.get_by_test_id("stChatMessage").first).to_contain_text("Add type hints and a docstring")
    answer = assistant_messages(page).last
    assert answer.get_by_test_id("stChatMessageContent").inner_text().strip()
    # The code it gives back is a rendered code block, syntax-coloured, with the text the drafter got
    # right highlighted in it.
    expect(answer.locator(f"pre code {DRAFT_SPAN}").first).to_be_visible()
    expect(answer.locator('pre code span[style*="color: #"]').first).to_be_visible()

    # Copy buttons: the code block's copies its code, the answer's the answer as the model wrote it.
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=own_server_app.url)
    block = answer.locator("pre").first
    block.locator("xpath=..").get_by_role("button", name="Copy", exact=True).click()
    expect(block.locator("xpath=..").get_by_role("button", name="Copied")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == block.text_content().rstrip("\n")
    stats = answer_stats(answer)
    assert stats.get("mode") == "speculative" and stats.get("drafter") == "lookup", stats
    expect(complete).to_have_count(0)  # the examples are for an empty conversation
    store = ConversationStore(own_server_app.data_dir / "conversations.sqlite3")
    [conversation] = [c for c in store.conversations() if c["title"].startswith("Add type hints")]
    assert [m["role"] for m in store.messages(conversation["id"])] == ["user", "assistant"]
    answer.get_by_role("button", name="Copy answer").click()
    assert page.evaluate("navigator.clipboard.readText()") == store.messages(conversation["id"])[1]["content"]
