"""Compare page support: standard and speculative answers to one prompt, side by side, and whether
their texts are identical."""

from __future__ import annotations

import difflib
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import streamlit as st

from config import Settings
from utils.app.answer_view import Answer, answer_events, show_fallbacks, show_text, stream_answer
from utils.app.runtime import explain, run, server, store
from utils.app.sidebar import Choices
from utils.app.speed import no_speedup_reason, remember_baseline
from utils.engine.drafters import NONE
from utils.engine.events import DoneEvent, GenerationError
from utils.engine.stats import AnswerStats
from utils.errors import SpecError


@dataclass(frozen=True)
class Headline:
    """The Compare page's speed-up: the median of the pairs' speed-ups, a figure only where the pairs
    agree that speculation changed the speed (their range leaves out ×1.00); else why not."""

    ratios: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)

    @property
    def beyond_noise(self) -> bool:
        return len(self.ratios) > 1 and not min(self.ratios) <= 1.0 <= max(self.ratios)

    def detail(self) -> str:
        """The pairs behind the headline, in words."""
        if len(self.ratios) == 1:
            return (f"One pair: ×{self.ratios[0]:.2f}. One pair cannot tell a speed-up from this machine's noise: "
                    "run 2 or more pairs for a figure.")
        low, high = min(self.ratios), max(self.ratios)
        verdict = "" if self.beyond_noise else (" — within noise, so no figure: the pairs disagree on whether "
                                                 "speculation is faster")
        return (f"Speed-up over {len(self.ratios)} pairs, each side first as often as second: median "
                f"×{self.median:.2f}, range ×{low:.2f} – ×{high:.2f}{verdict}.")


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
            answers[mode] = stream_answer(settings, url, choices, request, charts=False, highlight=True,
                                          drafter=NONE if mode == "standard" else choices.drafter)
    if answers["standard"].stats:
        remember_baseline(store(settings), url, answers["standard"].stats, "standard run on the Compare page")
    pairs = [_pair(order, answers["standard"].stats, answers["speculative"].stats)]
    notes: list[str] = []
    if repeats > 1 and all(answer.stats for answer in answers.values()):
        if reason := more_pairs_skipped(answers["speculative"].stats):
            notes.append(reason)
        else:
            more, failure = _more_pairs(settings, url, choices, request, order, repeats - 1)
            pairs += more
            notes += [failure] if failure else []
    return {"prompt": prompt, "order": order, "temperature": choices.temperature, "pairs": pairs, "notes": notes,
            **{mode: vars(answer) for mode, answer in answers.items()}}


def more_pairs_skipped(speculative: AnswerStats | None) -> str | None:
    """Why the timed pairs after the first are not run: where the speculative run drafted (almost)
    nothing, more pairs would time standard generation against itself for minutes and show nothing."""
    if speculative is None or (reason := no_speedup_reason(speculative)) is None:
        return None
    return f"No more pairs were run: the speculative run {reason.replace('(why: above)', '(why: in its column)')}."


def _pair(order: list[str], standard: AnswerStats | None, speculative: AnswerStats | None) -> dict[str, Any]:
    return {"order": order, "standard": standard, "speculative": speculative}


def _more_pairs(settings: Settings, url: str, choices: Choices, request, order: list[str],
                count: int) -> tuple[list[dict[str, Any]], str | None]:
    """`count` more pairs, timed only (nothing drawn but a progress bar), alternating the order; and
    why they stopped short, if they did."""
    pairs: list[dict[str, Any]] = []
    failure = None
    bar = st.progress(0.0, text=f"Repeating the pair {count} more times, alternating which side goes first…")
    for number in range(count):
        order = order[::-1]
        stats: dict[str, AnswerStats] = {}
        try:
            for mode in order:
                stats[mode] = timed_answer(settings, url, choices, request, NONE if mode == "standard"
                                           else choices.drafter)
        except SpecError as error:
            failure = (f"Repeat {number + 1} failed, so the spread covers {len(pairs) + 1} pairs: "
                       f"{explain(error, settings)}")
            break
        pairs.append(_pair(order, stats["standard"], stats["speculative"]))
        bar.progress((number + 1) / count, text=f"Pair {number + 2} of {count + 1} done")
    bar.empty()
    return pairs, failure


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


def show_comparison(result: dict[str, Any]) -> None:
    """The two answers, the accepted draft text highlighted, their speeds (the median of the pairs,
    the first pair as detail), and whether the texts are identical."""
    standard, speculative = result["standard"], result["speculative"]
    for column, mode in zip(st.columns(2), ("standard", "speculative")):
        answer = result[mode]
        drafter = answer["stats"].drafter if answer["stats"] else None
        column.subheader(f"Speculative ({drafter})" if drafter else mode.capitalize())
        column.caption("ran first" if result["order"][0] == mode else "ran second")
        show_text(column.container(), answer["text"], answer["pieces"], highlight=True)
        with column:
            show_fallbacks(answer["stats"])
        if answer["note"]:
            column.error(answer["note"])
    for note in result.get("notes", []):
        st.info(note)
    if not (standard["stats"] and speculative["stats"]):
        st.error("One of the runs failed, so there is nothing to compare: see its message above.")
        return
    pairs = [pair for pair in result.get("pairs") or [] if pair["standard"] and pair["speculative"]]
    pairs = pairs or [_pair(result["order"], standard["stats"], speculative["stats"])]
    first, second, rate, speedup = st.columns(4)
    first.metric("Time to first token, standard", _seconds(_median(p["standard"].time_to_first_token_s for p in pairs)))
    second.metric("Time to first token, speculative",
                  _seconds(_median(p["speculative"].time_to_first_token_s for p in pairs)))
    rate.metric("Tokens/s, standard → speculative",
                f"{_median(p['standard'].tokens_per_second for p in pairs):.1f} → "
                f"{_median(p['speculative'].tokens_per_second for p in pairs):.1f}",
                help="the median of the pairs" if len(pairs) > 1 else None)
    headline = Headline(speedups(pairs))
    if reason := no_speedup_reason(speculative["stats"]):
        speedup.metric("Speed-up", "—", help="no figure where speculation hardly ran")
        st.info(f"No speed-up shown: {reason}.")
    elif headline.ratios:
        speedup.metric("Speed-up", f"×{headline.median:.2f}" if headline.beyond_noise else "—",
                       help="the median of the pairs, shown where their range leaves out ×1.00")
        st.caption(headline.detail())
    if len(pairs) > 1:
        shown = pairs[0]
        st.caption(f"First pair (the texts above): {shown['standard'].tokens_per_second:.1f} → "
                   f"{shown['speculative'].tokens_per_second:.1f} tokens/s.")
    if standard["text"] == speculative["text"]:
        st.success("The two texts are identical.")
        return
    why = (" With temperature above 0 the two runs are different samples, so they may differ; at temperature 0 "
           "they must be identical.") if result["temperature"] > 0 else ""
    st.warning("The two texts differ." + why)
    diff = difflib.unified_diff(standard["text"].splitlines(), speculative["text"].splitlines(),
                                "standard", "speculative", lineterm="")
    st.code("\n".join(diff), language="diff")


def _median(values: Iterable[float | None]) -> float | None:
    measured = [value for value in values if value is not None]
    return statistics.median(measured) if measured else None


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"
