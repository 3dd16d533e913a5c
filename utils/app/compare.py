"""Compare page support: standard and speculative answers to one prompt, side by side, and whether
their texts are identical."""

from __future__ import annotations

import difflib
from typing import Any

import streamlit as st

from config import Settings
from utils.app.answer_view import Answer, show_text, stream_answer
from utils.app.runtime import store
from utils.app.sidebar import Choices
from utils.app.speed import no_speedup_reason, remember_baseline
from utils.engine.drafters import NONE


def compare(settings: Settings, url: str, choices: Choices, prompt: str, standard_first: bool) -> dict[str, Any]:
    """Standard and speculative answers to `prompt`, one after the other, streamed side by side."""
    request = choices.request([{"role": "user", "content": prompt}])
    columns = dict(zip(("standard", "speculative"), st.columns(2)))
    columns["standard"].subheader("Standard")
    columns["speculative"].subheader(f"Speculative ({choices.drafter})")
    order = ["standard", "speculative"] if standard_first else ["speculative", "standard"]
    answers: dict[str, Answer] = {}
    for position, mode in enumerate(order):
        with columns[mode]:
            st.caption("ran first" if position == 0 else "ran second")
            answers[mode] = stream_answer(settings, url, choices, request, charts=False,
                                          drafter=NONE if mode == "standard" else choices.drafter)
    if answers["standard"].stats:
        remember_baseline(store(settings), url, answers["standard"].stats, "standard run on the Compare page")
    return {"prompt": prompt, "order": order, "temperature": choices.temperature,
            **{mode: vars(answer) for mode, answer in answers.items()}}


def show_comparison(result: dict[str, Any], texts: bool = True) -> None:
    """The two answers (unless already on screen), their speeds, and whether the texts are identical."""
    standard, speculative = result["standard"], result["speculative"]
    if texts:
        for column, mode in zip(st.columns(2), ("standard", "speculative")):
            answer = result[mode]
            drafter = (answer["stats"] or {}).get("drafter")
            column.subheader(f"Speculative ({drafter})" if drafter else mode.capitalize())
            column.caption("ran first" if result["order"][0] == mode else "ran second")
            show_text(column.container(), answer["text"], answer["pieces"], highlight=True)
            if answer["note"]:
                column.error(answer["note"])
    if not (standard["stats"] and speculative["stats"]):
        st.error("One of the runs failed, so there is nothing to compare: see its message above.")
        return
    first, second, rate, speedup = st.columns(4)
    first.metric("Time to first token, standard", _seconds(standard["stats"]["time_to_first_token_s"]))
    second.metric("Time to first token, speculative", _seconds(speculative["stats"]["time_to_first_token_s"]))
    rate.metric("Tokens/s, standard → speculative",
                f"{standard['stats']['tokens_per_second']:.1f} → {speculative['stats']['tokens_per_second']:.1f}")
    if reason := no_speedup_reason(speculative["stats"]):
        speedup.metric("Speed-up", "—", help="no figure where speculation hardly ran")
        st.info(f"No speed-up shown: {reason}.")
    elif standard["stats"]["tokens_per_second"]:
        ratio = speculative["stats"]["tokens_per_second"] / standard["stats"]["tokens_per_second"]
        speedup.metric("Speed-up", f"×{ratio:.2f}", help="measured just now, on the same server and target")
    if standard["text"] == speculative["text"]:
        st.success("The two texts are identical.")
        return
    why = (" With temperature above 0 the two runs are different samples, so they may differ; at temperature 0 "
           "they must be identical.") if result["temperature"] > 0 else ""
    st.warning("The two texts differ." + why)
    diff = difflib.unified_diff(standard["text"].splitlines(), speculative["text"].splitlines(),
                                "standard", "speculative", lineterm="")
    st.code("\n".join(diff), language="diff")


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"
