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
from utils.app.asks import ask_kind, first_asks_measured, keep_first_asks, remember_answer
from utils.app.runtime import explain, run, server
from utils.app.sidebar import Choices
from utils.app.speed import no_speedup_reason
from utils.bench.first_asks import AGAIN, FIRST
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
            return (f"One pair: ×{self.ratios[0]:.2f}, a single measurement: it cannot tell a speed-up from this "
                    "machine's noise. More pairs give a spread, except where the drafter remembers answers: "
                    "there the later pairs are repeats.")
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
    # Whether the drafter had answered this question before (suffix decoding copies its earlier answer):
    # decided before the pair runs, and kept with it. No baseline is taken from the standard run here: it
    # answers another prompt than Chat's, often from the server's cache (Chat's baseline stays its own).
    ask = ask_kind(url, choices.target, choices.drafter, prompt.strip())
    for position, mode in enumerate(order):
        with columns[mode]:
            st.caption("ran first" if position == 0 else "ran second")
            answers[mode] = stream_answer(settings, url, choices, request, charts=False, highlight=True,
                                          drafter=NONE if mode == "standard" else choices.drafter)
    remember_answer(url, choices.target, answers["speculative"].stats, prompt.strip())
    pairs = [_pair(order, answers["standard"].stats, answers["speculative"].stats, ask)]
    notes: list[str] = []
    if repeats > 1 and all(answer.stats for answer in answers.values()):
        if reason := more_pairs_skipped(answers["speculative"].stats):
            notes.append(reason)
        else:
            more, failure = _more_pairs(settings, url, choices, request, order, repeats - 1, prompt.strip())
            pairs += more
            notes += [failure] if failure else []
    earlier = list(first_asks_measured(url, choices.target, prompt.strip()))
    keep_first_asks(url, choices.target, prompt.strip(), speedups([p for p in pairs if p["ask"] == FIRST]))
    return {"prompt": prompt, "order": order, "temperature": choices.temperature, "pairs": pairs, "notes": notes,
            "drafter": choices.drafter, "earlier_first_asks": earlier,
            **{mode: vars(answer) for mode, answer in answers.items()}}


def more_pairs_skipped(speculative: AnswerStats | None) -> str | None:
    """Why the timed pairs after the first are not run: where the speculative run drafted (almost)
    nothing, more pairs would time standard generation against itself for minutes and show nothing."""
    if speculative is None or (reason := no_speedup_reason(speculative)) is None:
        return None
    return f"No more pairs were run: the speculative run {reason.replace('(why: above)', '(why: in its column)')}."


def _pair(order: list[str], standard: AnswerStats | None, speculative: AnswerStats | None,
          ask: str = FIRST) -> dict[str, Any]:
    return {"order": order, "standard": standard, "speculative": speculative, "ask": ask}


def _more_pairs(settings: Settings, url: str, choices: Choices, request, order: list[str],
                count: int, text: str) -> tuple[list[dict[str, Any]], str | None]:
    """`count` more pairs, timed only (nothing drawn but a progress bar), alternating the order; and
    why they stopped short, if they did."""
    pairs: list[dict[str, Any]] = []
    failure = None
    bar = st.progress(0.0, text=f"Repeating the pair {count} more times, alternating which side goes first…")
    for number in range(count):
        order = order[::-1]
        stats: dict[str, AnswerStats] = {}
        ask = ask_kind(url, choices.target, choices.drafter, text)
        try:
            for mode in order:
                stats[mode] = timed_answer(settings, url, choices, request, NONE if mode == "standard"
                                           else choices.drafter)
        except SpecError as error:
            failure = (f"Repeat {number + 1} failed, so the spread covers {len(pairs) + 1} pairs: "
                       f"{explain(error, settings)}")
            break
        remember_answer(url, choices.target, stats["speculative"], text)
        pairs.append(_pair(order, stats["standard"], stats["speculative"], ask))
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
        if answer["note"]:  # a finished answer's note (Max tokens) a warning, as in Chat; a failure an error
            (column.warning if answer["stats"] else column.error)(answer["note"])
    for note in result.get("notes", []):
        st.info(note)
    if not (standard["stats"] and speculative["stats"]):
        st.error("One of the runs failed, so there is nothing to compare: see its message above.")
        return
    pairs = [pair for pair in result.get("pairs") or [] if pair["standard"] and pair["speculative"]]
    pairs = pairs or [_pair(result["order"], standard["stats"], speculative["stats"])]
    # Short labels: a long one is cut mid-word in a quarter of the page.
    first, second, rate, speedup = st.columns(4)
    first.metric("First token, standard", _seconds(_median(p["standard"].time_to_first_token_s for p in pairs)),
                 help="seconds until the standard answer's first token (the median of the pairs)")
    second.metric("First token, speculative", _seconds(_median(p["speculative"].time_to_first_token_s for p in pairs)),
                  help="seconds until the speculative answer's first token (the median of the pairs)")
    label, value, meaning, repeats = rate_figures(pairs)
    rate.metric(label, value, help=meaning)
    if reason := no_speedup_reason(speculative["stats"]):
        speedup.metric("Speed-up", "—", help="no figure where speculation hardly ran")
        st.info(f"No speed-up shown: {reason}.")
    else:
        show_speedups(speedup, pairs, result.get("drafter") or speculative["stats"].drafter or "the drafter",
                      result.get("earlier_first_asks") or [])
    st.caption(meaning)
    if repeats:
        st.caption(repeats)
    if len(pairs) > 1:
        shown = pairs[0]
        st.caption(f"First pair (the texts above): {shown['standard'].tokens_per_second:.1f} → "
                   f"{shown['speculative'].tokens_per_second:.1f} tokens/s, standard → speculative, "
                   f"{'asked again' if shown.get('ask') == AGAIN else 'a first ask'}.")
    if standard["text"] == speculative["text"]:
        st.success("The two texts are identical.")
        return
    why = (" With temperature above 0 the two runs are different samples, so they may differ; at temperature 0 "
           "they must be identical.") if result["temperature"] > 0 else ""
    st.warning("The two texts differ." + why)
    diff = difflib.unified_diff(standard["text"].splitlines(), speculative["text"].splitlines(),
                                "standard", "speculative", lineterm="")
    st.code("\n".join(diff), language="diff")


def rate_figures(pairs: list[dict[str, Any]]) -> tuple[str, str, str, str | None]:
    """The Tokens/s figure: its label, its value (standard → speculative, the medians of the first asks
    where there are any, as the headline), what it is in words; and the repeats' figure apart, in words
    (None where there are none, or where no pair was a first ask and the figure is theirs)."""
    first = [p for p in pairs if p.get("ask", FIRST) == FIRST]
    again = [p for p in pairs if p.get("ask") == AGAIN]
    shown, kind = (first, "first ask") if first else (again, "asked again")
    what = ("on this prompt asked for the first time" if first
            else "on this prompt asked again (no first ask in this run): the drafter copies its earlier answer")
    meaning = (f"Tokens/s, {kind}: {_rates(shown)} standard → speculative, the median over {_count(shown)} {what}.")
    repeats = None
    if first and again:
        repeats = (f"Tokens/s, asked again: {_rates(again)} standard → speculative, the median over {_count(again)} "
                   "of the same prompt asked again; the drafter copies its earlier answer, so the figure above "
                   "leaves them out.")
    return f"Tokens/s, {kind}", _rates(shown), meaning, repeats


def _rates(pairs: list[dict[str, Any]]) -> str:
    return (f"{_median(p['standard'].tokens_per_second for p in pairs):.1f} → "
            f"{_median(p['speculative'].tokens_per_second for p in pairs):.1f}")


def show_speedups(slot, pairs: list[dict[str, Any]], drafter: str, earlier: list[float]) -> None:
    """The headline (in `slot`): the speed-up of the first asks, pairs where the drafter had not seen an
    answer to this prompt; under it, in words, what each figure compares, and the repeats' apart."""
    first = Headline(speedups([p for p in pairs if p.get("ask", FIRST) == FIRST]))
    again = Headline(speedups([p for p in pairs if p.get("ask") == AGAIN]))
    if not any(p.get("ask", FIRST) == FIRST for p in pairs):
        slot.metric("Speed-up, first ask", "—", help="no pair here was a first ask: see under the figures")
        before = f" (its first ask: ×{statistics.median(earlier):.2f}, {_count(earlier)})" if earlier else ""
        st.caption(f"First ask: none in this run. {drafter} answered this prompt before in this app{before}, "
                   "so every pair here is a repeat.")
    elif first.ratios:
        # One first ask is all a prompt has with a drafter that remembers answers: its figure is the
        # headline, said to be one pair; more pairs give one only where their range leaves out ×1.00.
        shown = len(first.ratios) == 1 or first.beyond_noise
        slot.metric("Speed-up, first ask", f"×{first.median:.2f}" if shown else "—",
                    help="standard against speculative on this prompt asked for the first time")
        st.caption(f"First ask ×{first.median:.2f} ({_count(first.ratios)}): standard against speculative on this "
                   f"prompt asked for the first time ({drafter} had not seen an answer to it), the speed a new "
                   "question gets.")
        st.caption(first.detail())
    if again.ratios:
        low, high = min(again.ratios), max(again.ratios)
        spread = f", range ×{low:.2f} – ×{high:.2f}" if len(again.ratios) > 1 else ""
        st.caption(f"Asked again ×{again.median:.2f} ({_count(again.ratios)}, median{spread}): the same prompt "
                   f"asked again after {drafter} had answered it; it remembers that answer and drafts a copy, so "
                   "this is not the speed of a new question and the headline leaves it out.")


def _count(ratios: list) -> str:
    return f"{len(ratios)} pair{'s' if len(ratios) != 1 else ''}"


def _median(values: Iterable[float | None]) -> float | None:
    measured = [value for value in values if value is not None]
    return statistics.median(measured) if measured else None


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"
