"""Sidebar settings that outlive the browser session: each widget's default is the value last chosen
(read from the conversation store), and whatever the widgets hold at the end of a run is saved back.

Streamlit forgets st.session_state on a reload; the store does not. A remembered value that no longer
fits (a model since removed) falls back to the usual default.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import streamlit as st

from utils.app.store import ConversationStore

# The widget keys whose values are remembered.
REMEMBERED = ("target", "speculative", "drafter", "draft_length", "p_min", "draft_top_k", "temperature", "top_k",
              "seed", "max_tokens", "highlight", "think")


class Preferences:
    def __init__(self, store: ConversationStore):
        self.store = store
        self.saved = store.preferences()

    def default(self, key: str, fallback: Any, allowed: Collection[Any] | None = None) -> Any:
        """The value last chosen for the widget `key`, else `fallback` (also when it is not in `allowed`)."""
        value = self.saved.get(key, fallback)
        return value if allowed is None or value in allowed else fallback

    def index(self, key: str, options: list[Any], fallback: Any) -> int:
        """For a selectbox: the index of the option last chosen, else of `fallback`."""
        return options.index(self.default(key, fallback, options))

    def keep(self) -> None:
        """Save the remembered widgets' current values that differ from the stored ones."""
        changed = {key: st.session_state[key] for key in REMEMBERED
                   if key in st.session_state and self.saved.get(key, object()) != st.session_state[key]}
        if changed:
            self.store.set_preferences(changed)
            self.saved.update(changed)
