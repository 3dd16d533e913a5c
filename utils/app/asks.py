"""Which of the app's answers were first asks: whether the drafter had already answered the same
question on this server (utils/bench/first_asks.py says why a repeat's speed-up is shown apart).

Suffix decoding keeps what it learns where the answers are made: in the app's engine memory, or in the
server that speculates in process (the app's own embedded server). Both live as long as this process
or less, so a record kept here, for the process, never takes a repeat for a first ask; after the server
was restarted (its memory gone) it may take a first ask for a repeat, the safe side."""

from __future__ import annotations

from typing import Any

import streamlit as st

from utils.bench.first_asks import AGAIN, FIRST, remembers_answers
from utils.engine.stats import AnswerStats


@st.cache_resource(show_spinner=False)
def _record() -> dict[tuple[str, str, str], list[float]]:
    """(server, target, question) -> the first-ask speed-ups measured for it (none yet: an empty list)."""
    return {}


def question(messages: list[dict[str, Any]]) -> str:
    """What a drafter that remembers answers matches a request by: its last user message (the prompt's
    end, before the answer, is what suffix decoding keeps with each answer)."""
    said = [m.get("content") or "" for m in messages if m.get("role") == "user"]
    return said[-1].strip() if said else ""


def ask_kind(url: str, target: str, drafter: str, text: str) -> str:
    """FIRST, or AGAIN where `drafter` remembers answers and has answered `text` on this server before."""
    return AGAIN if remembers_answers(drafter) and (url, target, text) in _record() else FIRST


def remember_answer(url: str, target: str, stats: AnswerStats | None, text: str) -> None:
    """A finished answer whose drafter remembers answers: the next answer to `text` is asked again."""
    if stats is not None and stats.done_reason != "stopped" and remembers_answers(stats.drafter or ""):
        _record().setdefault((url, target, text), [])


def first_asks_measured(url: str, target: str, text: str) -> list[float]:
    """The first-ask speed-ups Compare measured for `text` before (kept to show beside its repeats)."""
    return _record().get((url, target, text), [])


def keep_first_asks(url: str, target: str, text: str, ratios: list[float]) -> None:
    if ratios:
        _record().setdefault((url, target, text), []).extend(ratios)
