"""Chat page support: choosing, starting, renaming, deleting and exporting conversations, the speed
baseline in the sidebar, and the conversation as the model sees it."""

from __future__ import annotations

from typing import Any

import streamlit as st

from config import Settings
from utils.app.runtime import explain, store
from utils.app.speed import BASELINE_MAX_TOKENS, baseline_text, measure_baseline
from utils.app.store import ConversationStore
from utils.engine.client import ServerError
from utils.engine.events import GenerationError
from utils.hosts import HostError


def conversation_controls(conversations: ConversationStore) -> int | None:
    """Pick, start, rename, delete or export a conversation; returns the open one's id.

    With nothing chosen in this session (a reload, a restart) the most recent conversation opens.
    """
    listed = conversations.conversations()
    titles = {c["id"]: c["title"] for c in listed}
    current = st.session_state.get("conversation_id")
    if current not in titles:
        current = listed[0]["id"] if listed else None
    st.session_state.conversation_id = current

    def start_new() -> None:
        st.session_state.conversation_id = conversations.create()

    pick, new, manage = st.columns([6, 1, 1], vertical_alignment="bottom")
    new.button("New", icon=":material/add:", on_click=start_new, width="stretch")
    if current is None:
        pick.caption("No conversations yet: ask something below to start one.")
        return None
    chosen = pick.selectbox("Conversation", list(titles), index=list(titles).index(current),
                            format_func=lambda id_: titles[id_])
    st.session_state.conversation_id = chosen

    def rename() -> None:
        conversations.rename(chosen, st.session_state[f"title-{chosen}"])

    def delete() -> None:
        conversations.delete(chosen)
        st.session_state.conversation_id = None

    with manage.popover("Manage", icon=":material/more_horiz:", width="stretch"):
        st.text_input("Title", titles[chosen], key=f"title-{chosen}")
        st.button("Rename", on_click=rename, key="rename")
        slug = "".join(ch if ch.isalnum() else "-" for ch in titles[chosen].lower()).strip("-")[:40] or "conversation"
        st.download_button("Export as JSON", conversations.export_json(chosen), f"{slug}.json",
                           "application/json", key="export-json")
        st.download_button("Export as Markdown", conversations.export_markdown(chosen), f"{slug}.md",
                           "text/markdown", key="export-markdown")
        st.button("Delete conversation", on_click=delete, type="primary", key="delete")
    return chosen


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
