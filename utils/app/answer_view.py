"""Answers on screen: streamed as the engine accepts them (accepted draft tokens highlighted, live
charts), and drawn again from the store with their stats."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import streamlit as st

from config import Settings
from utils.app import clipboard
from utils.app.charts import CHART_REFRESH_SECONDS, answer_figure, chart_key, stats_rows
from utils.app.highlight import pieces_html
from utils.app.runtime import context_full, engine_memory, failure_text, iterate, server
from utils.app.sidebar import Choices
from utils.app.speed import speedup_text
from utils.app.store import stats_summary
from utils.bench.first_asks import AGAIN
from utils.engine.client import OllamaClient
from utils.engine.drafters import NONE
from utils.engine.events import DoneEvent, Event, FallbackEvent, GenerationError, RoundEvent, TextEvent, ThinkingEvent
from utils.engine.request import GenerationRequest
from utils.engine.served import answer_decoder
from utils.engine.stats import AnswerStats, RoundRecord
from utils.errors import SpecError

# Redraw a streaming answer's text at most this often. Each redraw renders the whole answer and sends
# it to the browser; drawn per token, a standard answer (one token per event) paid for many more
# redraws than a speculative one (a run of accepted tokens per event), and on a machine the browser
# shares with the model that made speculation look much faster than it was (README, the screenshots).
TEXT_REFRESH_SECONDS = 0.1


@dataclass
class Streaming:
    """An answer asked for in a conversation. `started` once a script run generates it; `saved` is set
    when that run has saved it, finished or stopped."""

    conversation_id: int
    started: bool = False
    saved: threading.Event = field(default_factory=threading.Event)

    SAVE_WAIT_SECONDS = 30.0

    def wait(self) -> bool:
        """Wait for the run that generates this answer to save it; False if it did not in time."""
        return self.saved.wait(self.SAVE_WAIT_SECONDS)


@dataclass
class Answer:
    text: str = ""
    thinking: str = ""  # a thinking model's reasoning, shown folded above the answer
    thinking_pieces: list[list[str]] = field(default_factory=list)  # the reasoning's [text, origin]s
    pieces: list[list[str]] = field(default_factory=list)
    stats: AnswerStats | None = None
    note: str | None = None  # why it stopped early, or why it has no text at all
    fallbacks: list[str] = field(default_factory=list)
    stopped: bool = False  # interrupted before the end (Stop, or the page rerun while it streamed)
    live: AnswerStats | None = field(default=None, repr=False)  # the engine's live stats, and when its last round ended
    live_at: float = 0.0
    started_as: AnswerStats | None = field(default=None, repr=False)  # the figures before any round
    shown_tokens: int = 0  # output tokens of the text received so far (TextEvent.tokens), and when
    shown_at: float = 0.0
    standard_since: bool = True  # whether all the text since the last round is standard generation

    @property
    def failed(self) -> bool:
        return self.stats is None

    def add(self, event: TextEvent | ThinkingEvent) -> None:
        """A piece of the answer or of its reasoning, counted."""
        pieces = self.pieces if isinstance(event, TextEvent) else self.thinking_pieces
        pieces.append([event.text, event.origin])
        if isinstance(event, TextEvent):
            self.text += event.text
        else:
            self.thinking += event.text
        if event.tokens > self.shown_tokens:
            self.shown_tokens, self.shown_at = event.tokens, event.at_seconds
        self.standard_since = self.standard_since and event.origin == "standard"

    def round(self, event: RoundEvent) -> None:
        self.live, self.live_at, self.standard_since = event.stats, event.record.at_seconds, True

    def so_far(self) -> AnswerStats | None:
        """The figures of the text received so far: the last round's statistics with the tokens since.
        A standard segment streams many tokens before its round ends (a standard answer is one
        segment): Stop in one, and the rounds alone counted a few of the tokens on screen."""
        base = self.live or (self.started_as if self.shown_tokens else None)
        if base is None:
            return None
        stats = base.snapshot(self.live_at)
        if (extra := self.shown_tokens - stats.output_tokens) > 0:
            if self.standard_since:  # the segment streaming now, as its round will count it
                stats.observe_standard(RoundRecord(k=0, emitted=extra, seconds=self.shown_at - self.live_at,
                                                   at_seconds=self.shown_at))
            else:  # a round's text before its round's statistics came
                stats.output_tokens += extra
            stats.finish(self.shown_at)
        elif extra < 0 and self.shown_tokens:  # text held back (it may begin a stop string) is not shown
            stats.output_tokens = self.shown_tokens
            stats.finish(self.live_at)
        return stats

    def stop(self) -> None:
        """Mark the answer interrupted, keeping its text and the statistics of the tokens so far."""
        if self.stopped or self.stats is not None:
            return
        self.stopped = True
        self.stats = self.so_far()
        if self.stats is not None:
            self.stats.done_reason = "stopped"
        tokens = f"after {self.stats.output_tokens} tokens" if self.stats else "early"
        kept = "the partial answer is kept" if self.text else "no text had been generated"
        self.note = f"Stopped {tokens}: {kept}."


async def answer_events(settings: Settings, client: OllamaClient, target: str, drafter: str,
                        request: GenerationRequest) -> AsyncIterator[Event]:
    """The engine's events for one answer, on the shared client of the server: made in the server
    where it speculates in process (`cli.py serve`), else by the engine here (utils/engine/served.py)."""
    decoder = await answer_decoder(settings.engine, client, target, drafter, memory=engine_memory())
    async for event in decoder.stream(request):
        yield event


def show_text(slot, text: str, pieces: list[list[str]] | None, highlight: bool, cursor: bool = False,
              copy: bool = True) -> None:
    """Draw an answer in `slot` (a placeholder or container): rendered Markdown, with the accepted draft
    text highlighted inside it when asked (utils.app.highlight), or Streamlit's own Markdown; once it
    is done (no `cursor`), with `copy` a button under it copies it as Markdown."""
    if highlight and pieces:
        shown = pieces_html(pieces, cursor=cursor)
        slot.html(shown + clipboard.answer_button(text) if copy and not cursor else shown)
    elif not text and not cursor:
        slot.caption("(no text)")
    elif cursor or not copy:
        slot.markdown(text + ("▌" if cursor else ""))
    else:
        with slot.container():
            st.markdown(text)
            st.html(clipboard.answer_button(text))


def show_thinking(slot, thinking: str, pieces: list[list[str]] | None = None, highlight: bool = False, *,
                  thinking_now: bool = False) -> None:
    """A thinking model's reasoning, folded above its answer (open while it is still thinking), its
    accepted draft text highlighted as the answer's is."""
    if not thinking:
        slot.empty()
        return
    title = "Thinking…" if thinking_now else "Thinking"
    with slot.container(), st.expander(title, expanded=thinking_now, icon=":material/psychology:"):
        show_text(st.empty(), thinking, pieces, highlight, cursor=thinking_now, copy=False)


def stream_answer(settings: Settings, url: str, choices: Choices, request: GenerationRequest, *,
                  highlight: bool = False, baseline: dict[str, Any] | None = None, charts: bool = True,
                  drafter: str | None = None, answer: Answer | None = None, asked_again: bool = False) -> Answer:
    """Run one answer, drawing it in the current container as it is accepted, with live charts.

    Pass `answer` to keep what was generated if the script is interrupted (Stop, a rerun): Streamlit
    raises inside the script then, and `answer` is left marked stopped with the text so far.
    `asked_again`: its drafter has answered the same question before; the chart's speed-up says so."""
    drafter = choices.drafter if drafter is None else drafter
    answer = Answer() if answer is None else answer
    answer.started_as = AnswerStats(mode="speculative" if drafter != NONE else "standard", target=choices.target,
                                    drafter=None if drafter == NONE else drafter)
    thinking_slot, text_slot, notices, chart_slot = st.empty(), st.empty(), st.container(), st.empty()
    live = _LiveView(answer, thinking_slot, text_slot, chart_slot if charts else None, highlight, baseline,
                     asked_again)
    show_text(text_slot, "", [], highlight, cursor=True)
    events = answer_events(choices.decoder_settings(settings), server(settings, url), choices.target, drafter,
                           request)
    try:
        # closing(): if Streamlit stops the script mid-answer, the stream closes now.
        with closing(iterate(events)) as stream:
            for event in stream:
                if isinstance(event, TextEvent | ThinkingEvent):
                    answer.add(event)
                    live.draw(event.origin == "standard")
                elif isinstance(event, RoundEvent):
                    answer.round(event)
                    live.draw(True)
                elif isinstance(event, FallbackEvent):
                    answer.fallbacks.append(event.reason)
                    notices.warning(f"{event.reason[:1].upper()}{event.reason[1:]}.")  # says what happened next
                elif isinstance(event, DoneEvent):
                    answer.text, answer.stats = event.text, event.stats
    except GenerationError as error:
        answer.text = error.partial
        kept = "the partial text was kept" if error.partial else "no text was generated"
        answer.note = f"The answer stopped early ({kept}): {failure_text(error, settings)}"
    except SpecError as error:
        answer.note = failure_text(error, settings)
    except BaseException:  # Streamlit stopping or rerunning the script: keep what was generated
        answer.stop()
        raise
    show_thinking(thinking_slot, answer.thinking, answer.thinking_pieces, highlight)
    show_text(text_slot, answer.text, answer.pieces, highlight)
    if answer.stats and answer.stats.done_reason == "length":
        answer.note = length_note(answer.stats, request.max_tokens) or context_full(settings)
    if answer.note:  # a failure is an error; a finished answer's note (Max tokens) a warning, as when saved
        (notices.warning if answer.stats else notices.error)(answer.note)
    if charts and answer.stats:
        chart_slot.plotly_chart(answer_figure(answer.stats, baseline, asked_again), key=chart_key())
    elif charts:
        chart_slot.empty()
    return answer


class _LiveView:
    """An answer's text and live chart while it streams, drawn from the same events: the chart counts
    the tokens on screen, and draft text (green) is drawn with its round's figures, so the caption never
    says less was drafted than the green shows."""

    def __init__(self, answer: Answer, thinking_slot, text_slot, chart_slot, highlight: bool,
                 baseline: dict[str, Any] | None, asked_again: bool = False):
        self.answer, self.highlight, self.baseline, self.asked_again = answer, highlight, baseline, asked_again
        self.thinking_slot, self.text_slot, self.chart_slot = thinking_slot, text_slot, chart_slot
        self.text_at = self.chart_at = 0.0
        self.drawn = (0, 0)  # characters of the thinking and the text drawn
        self.charted = (0, 0)  # tokens and accepted draft tokens the chart counted

    def draw(self, counted: bool) -> None:
        """Redraw what changed, at most every so often; `counted`: the figures count all the text received
        (a round's draft text comes just before its round's statistics: it waits for them)."""
        answer, now = self.answer, time.monotonic()
        if not counted or now - self.text_at <= TEXT_REFRESH_SECONDS:
            return
        # The chart first: the browser draws each in turn, and new green must not show before its count.
        # New green is charted at once; otherwise the chart is redrawn less often than the text.
        accepted = answer.live.accepted_tokens if answer.live else 0
        due = accepted != self.charted[1] or now - self.chart_at > CHART_REFRESH_SECONDS
        stats = answer.so_far() if self.chart_slot is not None and due else None
        if stats is not None and (stats.output_tokens, stats.accepted_tokens) != self.charted:
            self.chart_slot.plotly_chart(answer_figure(stats, self.baseline, self.asked_again), key=chart_key())
            self.charted, self.chart_at = (stats.output_tokens, stats.accepted_tokens), now
        thinking, text = len(answer.thinking), len(answer.text)
        if thinking != self.drawn[0]:
            show_thinking(self.thinking_slot, answer.thinking, answer.thinking_pieces, self.highlight,
                          thinking_now=not text)
        if text != self.drawn[1]:
            show_text(self.text_slot, answer.text, answer.pieces, self.highlight, cursor=True)
        self.drawn, self.text_at = (thinking, text), now


def length_note(stats: AnswerStats, max_tokens: int) -> str | None:
    """What an answer that stopped at the Max tokens setting says under it (it ends mid-sentence, and
    without a note that looked like the model's own ending); None where "length" means something else
    (the server ran out of context before Max tokens)."""
    if not 0 < max_tokens <= stats.output_tokens:
        return None
    return (f"The answer stopped at Max tokens ({max_tokens}), perhaps mid-sentence: raise Max tokens in the "
            "sidebar for a longer one.")


def show_fallbacks(stats: AnswerStats | None) -> None:
    """Where speculation stopped within an answer and why, each reason once, in full."""
    for fallback in stats.fallbacks if stats else []:
        st.info(f"After {fallback.at_token} tokens, {fallback.reason}.")


def show_message(message: dict[str, Any], highlight: bool, charts: bool = False,
                 actions: Callable[[], None] | None = None) -> None:
    """One stored message, as st.chat_message, with its stats one click away and `actions` (buttons)
    drawn at its foot."""
    with st.chat_message(message["role"]):
        show_thinking(st.empty(), message.get("thinking") or "", message.get("thinking_pieces"), highlight)
        show_text(st.container(), message["content"], message.get("pieces"), highlight,
                  copy=message["role"] == "assistant")
        stats = message.get("stats")
        show_fallbacks(stats)
        if message.get("note"):
            st.warning(message["note"])
        if stats:
            again = message.get("ask") == AGAIN  # its drafter had answered the same question: kept when asked
            speedup = speedup_text(stats, message.get("baseline"), message.get("created_at"),  # when it was made
                                   asked_again=again)
            st.caption(f"{stats_summary(stats)} · {speedup}")
            if charts:  # the last answer's charts in view, the others' one click away
                st.plotly_chart(answer_figure(stats, message.get("baseline"), again))
            with st.expander("Stats"):
                if not charts:
                    st.plotly_chart(answer_figure(stats, message.get("baseline"), again),
                                    key=f"charts-{message['id']}")
                st.table(pd.DataFrame(stats_rows(stats)).set_index("figure"))
        if actions is not None:
            actions()
