"""Compare page support: standard and speculative answers to one prompt, side by side, and whether
their texts are identical."""

from __future__ import annotations

import difflib
import statistics
from typing import Any

import streamlit as st

from config import Settings
from utils.app.answer_view import Answer, answer_events, show_text, stream_answer
from utils.app.runtime import explain, run, server, store
from utils.app.sidebar import Choices
from utils.app.speed import no_speedup_reason, remember_baseline
from utils.engine.drafters import NONE
from utils.engine.events import DoneEvent, GenerationError
from utils.engine.stats import AnswerStats
from utils.errors import SpecError


def compare(settings: Settings, url: str, choices: Choices, prompt: str, standard_first: bool,
            repeats: int = 1) -> dict[str, Any]:
    """Standard and speculative answers to `prompt`, one after the other, streamed side by side; then
    `repeats - 1` more pairs, timed only, each in the other order from the one before, so that each side
    runs as often first (on a cache the other side has not warmed) as second."""
    request = choices.request([{"role": "user", "content": prompt}], settings.engine)
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
    pairs = [_pair(order, answers["standard"].stats, answers["speculative"].stats)]
    if repeats > 1 and all(answer.stats for answer in answers.values()):
        pairs += _more_pairs(settings, url, choices, request, order, repeats - 1)
    return {"prompt": prompt, "order": order, "temperature": choices.temperature, "pairs": pairs,
            **{mode: vars(answer) for mode, answer in answers.items()}}


def _pair(order: list[str], standard: AnswerStats | None, speculative: AnswerStats | None) -> dict[str, Any]:
    return {"order": order, "standard": standard, "speculative": speculative}


def _more_pairs(settings: Settings, url: str, choices: Choices, request, order: list[str],
                count: int) -> list[dict[str, Any]]:
    """`count` more pairs, timed only (nothing drawn but a progress bar), alternating the order."""
    pairs: list[dict[str, Any]] = []
    bar = st.progress(0.0, text=f"Repeating the pair {count} more times, alternating which side goes first…")
    for number in range(count):
        order = order[::-1]
        stats: dict[str, AnswerStats] = {}
        try:
            for mode in order:
                stats[mode] = timed_answer(settings, url, choices, request, NONE if mode == "standard"
                                           else choices.drafter)
        except SpecError as error:
            st.warning(f"Repeat {number + 1} failed, so the spread covers {len(pairs) + 1} pairs: "
                       f"{explain(error, settings)}")
            break
        pairs.append(_pair(order, stats["standard"], stats["speculative"]))
        bar.progress((number + 1) / count, text=f"Pair {number + 2} of {count + 1} done")
    bar.empty()
    return pairs


def timed_answer(settings: Settings, url: str, choices: Choices, request, drafter: str) -> AnswerStats:
    """The stats of one whole answer, generated without drawing anything."""
    async def work() -> AnswerStats:
        async for event in answer_events(choices.decoder_settings(settings), server(settings, url), choices.target,
                                         drafter, request):
            if isinstance(event, DoneEvent):
                return event.stats
        raise GenerationError("the answer ended without its statistics", "")

    return run(work)


def speedups(pairs: list[dict[str, Any]]) -> list[float]:
    """The speed-up of each pair where speculation really ran (see no_speedup_reason)."""
    return [pair["speculative"].tokens_per_second / pair["standard"].tokens_per_second for pair in pairs
            if pair["standard"] and pair["speculative"] and pair["standard"].tokens_per_second
            and no_speedup_reason(pair["speculative"]) is None]


def show_comparison(result: dict[str, Any], texts: bool = True) -> None:
    """The two answers (unless already on screen), their speeds, and whether the texts are identical."""
    standard, speculative = result["standard"], result["speculative"]
    if texts:
        for column, mode in zip(st.columns(2), ("standard", "speculative")):
            answer = result[mode]
            drafter = answer["stats"].drafter if answer["stats"] else None
            column.subheader(f"Speculative ({drafter})" if drafter else mode.capitalize())
            column.caption("ran first" if result["order"][0] == mode else "ran second")
            show_text(column.container(), answer["text"], answer["pieces"], highlight=True)
            if answer["note"]:
                column.error(answer["note"])
    if not (standard["stats"] and speculative["stats"]):
        st.error("One of the runs failed, so there is nothing to compare: see its message above.")
        return
    first, second, rate, speedup = st.columns(4)
    first.metric("Time to first token, standard", _seconds(standard["stats"].time_to_first_token_s))
    second.metric("Time to first token, speculative", _seconds(speculative["stats"].time_to_first_token_s))
    rate.metric("Tokens/s, standard → speculative",
                f"{standard['stats'].tokens_per_second:.1f} → {speculative['stats'].tokens_per_second:.1f}")
    if reason := no_speedup_reason(speculative["stats"]):
        speedup.metric("Speed-up", "—", help="no figure where speculation hardly ran")
        st.info(f"No speed-up shown: {reason}.")
    elif ratios := speedups(result.get("pairs") or [_pair(result["order"], standard["stats"], speculative["stats"])]):
        speedup.metric("Speed-up", f"×{statistics.median(ratios):.2f}",
                       help="measured just now, on the same server and target; the median of the pairs")
        if len(ratios) > 1:
            low, high = min(ratios), max(ratios)
            noise = " — within noise: the pairs disagree on whether speculation is faster" if low <= 1 <= high else ""
            st.caption(f"Speed-up over {len(ratios)} pairs, each side first as often as second: median "
                       f"×{statistics.median(ratios):.2f}, range ×{low:.2f} – ×{high:.2f}{noise}.")
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
