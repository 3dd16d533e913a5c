"""Conversations in a real browser, on the app with its own embedded server and the smallest model:
regenerate the last answer, edit and resend a question, New twice then a question, delete after a
confirmation, search, and sidebar settings that survive a reload. What the page shows is checked against
the conversation store the app writes."""

from __future__ import annotations

import time

from playwright.sync_api import Page, expect

from tests.support.browser import RunningApp
from tests.support.driving import (
    ANSWER_TIMEOUT,
    LOOKUP_OPTION,
    answer_after,
    assistant_messages,
    choose,
    open_app,
    rerun_after,
    send,
    set_number,
    set_switch,
    sidebar,
)
from utils.app.store import ConversationStore

FIRST = "Name a fruit."
SECOND = "Name a colour."
EDITED = "Name a vegetable."
OTHER = "Name an animal."
PLANET = "Name a planet."


def conversations(app: RunningApp) -> ConversationStore:
    return ConversationStore(app.data_dir / "conversations.sqlite3")


def shape(store: ConversationStore, conversation_id: int) -> list[tuple[str, str]]:
    """The conversation as (role, question or '') pairs: questions by text, answers by role."""
    return [(m["role"], m["content"] if m["role"] == "user" else "") for m in store.messages(conversation_id)]


def wait_for_shape(store: ConversationStore, conversation_id: int, wanted: list[tuple[str, str]]) -> None:
    deadline = time.monotonic() + ANSWER_TIMEOUT / 1000
    while shape(store, conversation_id) != wanted and time.monotonic() < deadline:
        time.sleep(0.2)
    assert shape(store, conversation_id) == wanted


def test_regenerate_the_last_answer_then_edit_and_resend_a_question(page: Page, own_server_app: RunningApp):
    store = conversations(own_server_app)
    open_app(page, own_server_app.url)
    set_number(page, "Max tokens", 16)
    set_switch(page, "Speculative decoding", False)
    send(page, FIRST)
    send(page, SECOND)
    [conversation] = store.conversations()
    cid = conversation["id"]
    first_answers = [m["id"] for m in store.messages(cid) if m["role"] == "assistant"]

    # Regenerate: the last answer is replaced by a new one; the first stays.
    messages = page.get_by_test_id("stChatMessage")
    expect(messages.nth(1).get_by_role("button", name="Regenerate")).to_have_count(0)  # only the last answer
    answer_after(page, lambda: assistant_messages(page).last.get_by_role("button", name="Regenerate").click())
    wait_for_shape(store, cid, [("user", FIRST), ("assistant", ""), ("user", SECOND), ("assistant", "")])
    answers = [m["id"] for m in store.messages(cid) if m["role"] == "assistant"]
    assert answers[0] == first_answers[0] and answers[1] > first_answers[1], (first_answers, answers)
    expect(messages).to_have_count(4)

    # Edit the first question and send it again: it replaces the question and everything after it.
    rerun_after(page, lambda: messages.nth(0).get_by_role("button", name="Edit").click())
    box = page.get_by_test_id("stChatMessage").nth(0).get_by_role("textbox")
    expect(box).to_have_value(FIRST)
    box.fill(EDITED)
    box.press("Tab")  # the text area commits its value when it loses focus
    answer_after(page, lambda: page.get_by_role("button", name="Send", exact=True).click())
    wait_for_shape(store, cid, [("user", EDITED), ("assistant", "")])
    expect(messages).to_have_count(2)
    expect(messages.nth(0)).to_contain_text(EDITED)
    expect(page.get_by_text(SECOND)).to_have_count(0)
    assert store.conversation(cid)["title"] == EDITED  # named by its first question, as before
    expect(sidebar(page).get_by_role("button", name=EDITED)).to_be_visible()

    # With speculation on but nothing drafted (a short answer: the adaptive controller measures standard
    # speed first), no speed-up is shown, though a baseline exists: the reason is shown instead.
    expect(sidebar(page).get_by_text("Speed-ups are measured against the standard baseline")).to_be_visible()
    set_switch(page, "Speculative decoding", True)
    choose(page, "Drafter", LOOKUP_OPTION)
    set_number(page, "Max tokens", 12)
    send(page, PLANET)
    assert store.messages(cid)[-1]["stats"].drafted_tokens == 0
    caption = assistant_messages(page).last.get_by_test_id("stCaptionContainer").first
    expect(caption).to_contain_text("no speed-up shown: drafted 0 of")
    expect(caption).not_to_contain_text("speed-up ×")


def test_new_twice_then_a_question_delete_asks_search_and_settings_survive_a_reload(
        page: Page, own_server_app: RunningApp):
    store = conversations(own_server_app)
    before = {c["id"] for c in store.conversations()}
    open_app(page, own_server_app.url)
    set_number(page, "Max tokens", 12)

    # New, New, then a question: exactly one new conversation, holding that question.
    for _ in range(2):
        rerun_after(page, lambda: sidebar(page).get_by_role("button", name="New conversation").click())
        expect(page.get_by_test_id("stChatMessage")).to_have_count(0)
    assert {c["id"] for c in store.conversations()} == before, "New stored an empty conversation"
    send(page, OTHER)
    [new] = [c for c in store.conversations() if c["id"] not in before]
    assert new["title"] == OTHER and shape(store, new["id"]) == [("user", OTHER), ("assistant", "")]
    expect(sidebar(page).get_by_role("button", name=OTHER)).to_have_attribute("data-testid", "stBaseButton-primary")

    # Search narrows the list, by title or by what was said.
    search = sidebar(page).get_by_placeholder("words in a title or message")
    rerun_after(page, lambda: (search.fill("animal"), search.press("Enter")))
    listed = sidebar(page).locator(".st-key-conversation_list").get_by_role("button")
    expect(listed).to_have_count(1)
    expect(listed).to_have_text(OTHER)
    rerun_after(page, lambda: (search.fill(""), search.press("Enter")))
    expect(listed).to_have_count(len(before) + 1)

    # Settings survive a reload (a new browser session): they are kept in the store.
    rerun_after(page, page.reload, timeout=ANSWER_TIMEOUT)
    expect(sidebar(page).get_by_label("Max tokens", exact=True)).to_have_value("12")

    # Delete asks first; Cancel keeps the conversation, Delete removes it.
    def ask_to_delete() -> None:
        page.get_by_role("button", name="Manage").click()
        rerun_after(page, lambda: page.get_by_role("button", name="Delete conversation…").click())
        expect(page.get_by_text(f"Delete “{OTHER}” and its 2 messages? This cannot be undone.")).to_be_visible()
        page.keyboard.press("Escape")  # the menu folds away, as a click elsewhere would fold it
        expect(page.get_by_role("button", name="Delete conversation…")).to_be_hidden()

    ask_to_delete()
    rerun_after(page, lambda: page.get_by_role("button", name="Cancel").click())
    expect(page.get_by_text("This cannot be undone.")).to_have_count(0)
    assert new["id"] in {c["id"] for c in store.conversations()}
    ask_to_delete()
    rerun_after(page, lambda: page.locator(".st-key-delete-confirm button").click())
    assert {c["id"] for c in store.conversations()} == before
    expect(sidebar(page).get_by_role("button", name=OTHER)).to_have_count(0)
