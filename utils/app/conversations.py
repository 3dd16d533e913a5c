"""Chat page support: the conversations listed in the sidebar (opened by id), renaming, exporting and
deleting (after a confirmation) the open one, the speed baseline in the sidebar, and the conversation as
the model sees it."""

from __future__ import annotations

from typing import Any

import streamlit as st

from config import Settings
from utils.app.answer_view import Streaming
from utils.app.runtime import explain, store, when
from utils.app.speed import BASELINE_MAX_TOKENS, baseline_text, measure_baseline
from utils.app.store import ConversationStore, clean_title
from utils.errors import SpecError

CONVERSATION_PARAMETER = "conversation"


def address_conversation(value: str | None) -> int | None:
    """The conversation id the page's address names, or None (absent, or not an id)."""
    return int(value) if value and value.isdecimal() else None


def conversation_list(conversations: ConversationStore) -> dict[str, Any] | None:
    """The conversations in the sidebar, the most recently active first, each a button that opens it, and
    "New conversation"; returns the open one (None: a new one, saved with its first question).

    The open one is named in the page's address (?conversation=ID), so a reload (a new session) reopens
    the conversation in view; with none there (a new tab) the most recent one opens. "New" stores
    nothing: an empty conversation is never saved.
    """
    everything = conversations.conversations()
    by_id = {c["id"]: c for c in everything}
    state = st.session_state
    current = state.get("conversation_id")
    if "conversation_id" not in state:
        current = address_conversation(st.query_params.get(CONVERSATION_PARAMETER))
    if current not in by_id:
        current = None if state.get("new_conversation") or not everything else everything[0]["id"]
    state.conversation_id = current
    if current is None:
        st.query_params.pop(CONVERSATION_PARAMETER, None)
    else:
        st.query_params[CONVERSATION_PARAMETER] = str(current)

    def start_new() -> None:
        state.conversation_id, state.new_conversation, state.confirm_delete = None, True, None

    def open_conversation(conversation_id: int) -> None:
        state.conversation_id, state.new_conversation, state.confirm_delete = conversation_id, False, None

    bar = st.sidebar
    bar.divider()
    bar.subheader("Conversations")
    bar.button("New conversation", icon=":material/add:", on_click=start_new, key="new", width="stretch")
    wanted = bar.text_input("Search conversations", key="conversation_search", placeholder="words in a title or "
                            "message", label_visibility="collapsed", disabled=not everything)
    listed = conversations.search(wanted) if wanted.strip() else everything
    if wanted.strip() and not listed:
        bar.caption(f"No conversation mentions “{wanted.strip()}”.")
    shelf = bar.container(key="conversation_list")
    for conversation in listed:
        shelf.button(conversation["title"], key=f"conversation-{conversation['id']}", width="stretch",
                   on_click=open_conversation, args=(conversation["id"],),
                   type="primary" if conversation["id"] == current else "secondary",
                   help=f"last active {when(conversation['updated_at'])}")
    return by_id.get(current)


def conversation_tools(conversations: ConversationStore, conversation: dict[str, Any] | None) -> None:
    """Rename, export or delete the open conversation; deleting asks first."""
    if conversation is None:
        st.caption("No conversations yet: ask something below to start one." if not conversations.conversations()
                   else "A new conversation: ask something below to start it.")
        return
    chosen, title = conversation["id"], conversation["title"]
    state = st.session_state

    def rename() -> None:
        conversations.rename(chosen, state[f"title-{chosen}"])

    def ask_to_delete() -> None:
        state.confirm_delete = chosen

    def delete() -> None:
        conversations.delete(chosen)
        state.conversation_id, state.confirm_delete = None, None

    def keep() -> None:
        state.confirm_delete = None

    heading, manage = st.columns([7, 1], vertical_alignment="bottom")
    heading.subheader(title)
    with manage.popover("Manage", icon=":material/more_horiz:", width="stretch"):
        st.text_input("Title", title, key=f"title-{chosen}")
        st.button("Rename", on_click=rename, key="rename")
        slug = "".join(ch if ch.isalnum() else "-" for ch in title.lower()).strip("-")[:40] or "conversation"
        st.download_button("Export as JSON", conversations.export_json(chosen), f"{slug}.json",
                           "application/json", key="export-json")
        st.download_button("Export as Markdown", conversations.export_markdown(chosen), f"{slug}.md",
                           "text/markdown", key="export-markdown")
        st.button("Delete conversation…", on_click=ask_to_delete, key="delete")
    if state.get("confirm_delete") == chosen:
        count = len(conversations.messages(chosen))
        st.warning(f"Delete “{title}” and its {count} message{'s' if count != 1 else ''}? This cannot be undone.")
        yes, no, _ = st.columns([1, 1, 4])
        yes.button("Delete", on_click=delete, type="primary", key="delete-confirm", icon=":material/delete:")
        no.button("Cancel", on_click=keep, key="delete-cancel")


def ask(conversations: ConversationStore, conversation_id: int | None, prompt: str) -> int:
    """Save a question and ask the next run to answer it. A new conversation is stored only now (so none
    is ever empty) and is named by its first question."""
    if conversation_id is None:
        conversation_id = conversations.create(prompt)
    elif not conversations.messages(conversation_id):
        conversations.rename(conversation_id, prompt)
    conversations.add_message(conversation_id, "user", prompt)
    state = st.session_state
    state.conversation_id, state.new_conversation = conversation_id, False
    state.streaming = Streaming(conversation_id)
    return conversation_id


def message_actions(conversations: ConversationStore, messages: list[dict[str, Any]], index: int,
                    enabled: bool) -> None:
    """Under a question: Edit (then resend it, which drops everything after it). Under the last answer:
    Regenerate. Each one saves what changes and asks the next run for a new answer."""
    message, state = messages[index], st.session_state
    conversation_id, message_id = message["conversation_id"], message["id"]
    last = index == len(messages) - 1

    def answer_again() -> None:
        state.streaming = Streaming(conversation_id)

    def regenerate() -> None:
        conversations.delete_from(conversation_id, message_id)
        answer_again()

    def edit() -> None:
        state.editing = message_id

    if message["role"] == "assistant" and last:
        st.button("Regenerate", icon=":material/refresh:", key=f"regenerate-{message_id}", on_click=regenerate,
                  disabled=not enabled, help="a new answer to the last question, in place of this one")
    elif message["role"] == "user":
        left, right = st.columns([1, 1 if last else 6])
        left.button("Edit", icon=":material/edit:", key=f"edit-{message_id}", on_click=edit, disabled=not enabled,
                    help="change this question and send it again; the messages after it are replaced")
        if last:  # a question left without an answer (the app stopped while answering it)
            right.button("Answer", icon=":material/send:", key=f"answer-{message_id}", on_click=answer_again,
                         disabled=not enabled)


def edit_question(conversations: ConversationStore, message: dict[str, Any], first: bool) -> None:
    """The question being edited, in place: its text in a box, Send (resend it, dropping the messages after
    it) and Cancel."""
    state, message_id, conversation_id = st.session_state, message["id"], message["conversation_id"]

    def send() -> None:
        text = state[f"edited-{message_id}"]
        state.editing = None
        if not text.strip():
            return
        conversations.delete_from(conversation_id, message_id)
        conversations.add_message(conversation_id, "user", text)
        conversation = conversations.conversation(conversation_id)
        title = conversation["title"] if conversation is not None else None
        if first and title == clean_title(message["content"]):  # named by its first question, not renamed since
            conversations.rename(conversation_id, text)
        state.streaming = Streaming(conversation_id)

    def cancel() -> None:
        state.editing = None

    with st.chat_message("user"):
        st.text_area("Edit the question", message["content"], key=f"edited-{message_id}",
                     label_visibility="collapsed")
        send_column, cancel_column, _ = st.columns([1, 1, 5])
        send_column.button("Send", icon=":material/send:", type="primary", key=f"resend-{message_id}", on_click=send)
        cancel_column.button("Cancel", key=f"cancel-edit-{message_id}", on_click=cancel)


def baseline_controls(settings: Settings, url: str, target: str) -> dict[str, Any] | None:
    """The standard baseline for this server and target in the sidebar, with a button to measure it."""
    conversations = store(settings)
    st.sidebar.divider()
    said = st.sidebar.empty()  # filled once the button below has had its say: a new baseline shows at once
    if st.sidebar.button("Measure baseline", help=f"a standard answer of {BASELINE_MAX_TOKENS} tokens to a fixed "
                                                  "prompt, on this server and target"):
        try:
            with st.spinner("Generating a standard answer…"):
                measure_baseline(settings, url, target)
        except SpecError as error:
            st.sidebar.error(explain(error, settings))
    baseline = conversations.baseline(url, target)
    if baseline:
        said.caption(f"Speed-ups are measured against the {baseline_text(baseline)}.")
    else:
        said.caption("Speed-up: no baseline measured yet. Answer once with speculation off, or measure one:")
    return baseline


def chat_history(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The conversation as the model sees it: answers that produced no text are left out."""
    return [{"role": m["role"], "content": m["content"]} for m in messages if m["content"]]
