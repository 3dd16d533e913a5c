"""Chat page support: the conversations listed in the sidebar (opened by id), renaming, exporting and
deleting (after a confirmation) the open one, the speed baseline in the sidebar, and the conversation as
the model sees it."""

from __future__ import annotations

from typing import Any

import streamlit as st

from config import Settings
from utils.app.runtime import explain, store, when
from utils.app.speed import BASELINE_MAX_TOKENS, baseline_text, measure_baseline
from utils.app.store import ConversationStore
from utils.engine.client import ServerError
from utils.engine.events import GenerationError
from utils.hosts import HostError


def conversation_list(conversations: ConversationStore) -> dict[str, Any] | None:
    """The conversations in the sidebar, the most recently active first, each a button that opens it, and
    "New conversation"; returns the open one (None: a new one, saved with its first question).

    With nothing chosen in this session (a reload, a restart) the most recent conversation opens. "New"
    stores nothing: an empty conversation is never saved.
    """
    listed = conversations.conversations()
    by_id = {c["id"]: c for c in listed}
    state = st.session_state
    current = state.get("conversation_id")
    if current not in by_id:
        current = None if state.get("new_conversation") or not listed else listed[0]["id"]
    state.conversation_id = current

    def start_new() -> None:
        state.conversation_id, state.new_conversation, state.confirm_delete = None, True, None

    def open_conversation(conversation_id: int) -> None:
        state.conversation_id, state.new_conversation, state.confirm_delete = conversation_id, False, None

    bar = st.sidebar
    bar.divider()
    bar.subheader("Conversations")
    bar.button("New conversation", icon=":material/add:", on_click=start_new, key="new", width="stretch")
    for conversation in listed:
        bar.button(conversation["title"], key=f"conversation-{conversation['id']}", width="stretch",
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


def baseline_controls(settings: Settings, url: str, target: str) -> dict[str, Any] | None:
    """The standard baseline for this server and target in the sidebar, with a button to measure it."""
    conversations = store(settings)
    st.sidebar.divider()
    baseline = conversations.baseline(url, target)
    if baseline:
        st.sidebar.caption(f"Speed-ups are measured against the {baseline_text(baseline)}.")
    else:
        st.sidebar.caption("Speed-up: no baseline measured yet. Answer once with speculation off, or measure one:")
    if st.sidebar.button("Measure baseline", help=f"a standard answer of {BASELINE_MAX_TOKENS} tokens to a fixed "
                                                  "prompt, on this server and target"):
        try:
            with st.spinner("Generating a standard answer…"):
                measure_baseline(settings, url, target)
        except (ServerError, GenerationError, HostError) as error:
            st.sidebar.error(explain(error, settings))
    return conversations.baseline(url, target)


def chat_history(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The conversation as the model sees it: answers that produced no text are left out."""
    return [{"role": m["role"], "content": m["content"]} for m in messages if m["content"]]
