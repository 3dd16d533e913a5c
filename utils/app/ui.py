"""What the Streamlit pages share: the server, the sidebar settings, running the engine's async event
stream from Streamlit's synchronous script, rendering answers as they stream, and the charts.

Nothing here decodes: the engine (utils.engine) does, and this module only
drives it and draws what it reports.
"""

from __future__ import annotations

import asyncio
import difflib
import html
import itertools
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from config import Settings, get_settings
from utils.bench.advisor import check_parallel
from utils.engine.client import LOGPROBS_SINCE, OllamaServer, ServerError, parse_version
from utils.hosts import HostError, target_host
from utils.engine.decoder import build_decoder
from utils.engine.drafters import NONE
from utils.engine.drafters.lookup import LOOKUP
from utils.engine.tokenizers import tokenizer_relation
from utils.engine.events import DoneEvent, Event, FallbackEvent, GenerationError, RoundEvent, TextEvent
from utils.engine.request import GenerationRequest
from utils.sampling import SamplingOptions
from utils.app.store import ConversationStore, stats_summary

T = TypeVar("T")

PROJECT_DIR = Path(__file__).resolve().parents[2]

DRAFT_COLOUR = "rgba(46, 160, 67, 0.28)"  # the background of accepted draft tokens in the text
ACCEPTED_COLOUR = "rgba(46, 160, 67, 0.9)"  # the same green, for bars
REJECTED_COLOUR = "rgba(150, 150, 150, 0.45)"
CHART_REFRESH_SECONDS = 0.3  # redraw live charts at most this often: each redraw is sent to the browser
BASELINE_PROMPT = "Write a short paragraph about the history of the bicycle."
BASELINE_MAX_TOKENS = 48


# -- running async code from a Streamlit script -------------------------------------------------------


def iterate(stream: AsyncIterator[T]) -> Iterator[T]:
    """The items of an async iterator, one by one, on a private event loop.

    Streamlit may stop the script at any point (a rerun, a closed tab); the `finally` then closes the
    async generator on its own loop, which runs its cleanup (closing HTTP clients) before the loop
    goes away.
    """
    loop = asyncio.new_event_loop()
    try:
        while True:
            try:
                item = loop.run_until_complete(anext(stream))
            except StopAsyncIteration:
                return
            yield item
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose:
            loop.run_until_complete(aclose())
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def run(work: Callable[[], Awaitable[T]]) -> T:
    """The result of `work()`, run on a private event loop (create server clients inside `work`)."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(work())
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def open_server(settings: Settings, url: str, timeout: float | None = None) -> OllamaServer:
    return OllamaServer(url, connect_timeout=settings.engine.connect_timeout, timeout=timeout or settings.engine.request_timeout)


async def with_server(settings: Settings, url: str, work: Callable[[OllamaServer], Awaitable[T]],
                      timeout: float | None = None) -> T:
    server = open_server(settings, url, timeout)
    try:
        return await work(server)
    finally:
        await server.aclose()


# -- the server ----------------------------------------------------------------------------------------


@st.cache_resource(show_spinner="Starting the embedded server…")
def _server_url(ollama_host: str | None, models_dir: str, _settings: Settings) -> str:
    # Cached per process: the embedded server is started once and stopped when the process exits.
    return target_host(_settings)


def server_url(settings: Settings) -> str:
    """The server in use; raises HostError with what to do when there is none."""
    return _server_url(settings.ollama_host, str(settings.models_dir), settings)


@dataclass
class ServerInfo:
    url: str
    version: str
    embedded: bool
    batches: bool  # the embedded server says whether it batches nested requests (not with --no-batch)
    models: list[str]

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return parse_version(self.version)


def server_info(settings: Settings) -> ServerInfo:
    """What the server says about itself, and its models; raises ServerError when it does not answer."""
    url = server_url(settings)
    try:
        about = httpx.get(f"{url}/api/version", timeout=settings.engine.connect_timeout * 2).json()
    except (httpx.HTTPError, ValueError) as error:
        raise ServerError(f"cannot reach the Ollama server at {url}: {error or type(error).__name__}") from None
    models = run(lambda: with_server(settings, url, lambda server: server.models()))
    return ServerInfo(url, str(about.get("version", "?")), bool(about.get("embedded")),
                      bool(about.get("batches_nested_requests", True)), sorted(models))


def explain(error: Exception, settings: Settings | None = None) -> str:
    """A plain message that says what happened and what to do."""
    message = getattr(error, "message", None) or str(error)
    lowered = message.lower()
    if isinstance(error, HostError):
        if "no bundled model" in lowered:
            return f"{message}, or install one on the Models page."
        return message
    if "cannot reach" in lowered or "connect" in lowered:
        return f"{message}. Start the server (or unset OLLAMA_HOST to use the embedded one), then try again."
    if "not found" in lowered:
        return (f"{message}. Install it on the Models page (embedded server) or run `ollama pull` for it, "
                "or pick another model in the sidebar.")
    if "context length" in lowered or "context is full" in lowered:
        size = f" ({settings.engine.num_ctx} tokens)" if settings else ""
        return (f"The conversation no longer fits in the model's context{size}: start a new conversation, "
                "or raise SPEC_NUM_CTX and restart the app.")
    return message


def when(stamp: str) -> str:
    """An ISO timestamp as local time, to the minute."""
    try:
        return datetime.fromisoformat(stamp).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return stamp


def store(settings: Settings) -> ConversationStore:
    return ConversationStore(settings.database_path)


# -- the sidebar ---------------------------------------------------------------------------------------


RELATION_LABELS = {"same": "same tokenizer", "cross": "cross-tokenizer", "unusable": "unusable",
                   LOOKUP: "prompt lookup, no model"}


@dataclass
class Choices:
    """What the sidebar asks for an answer."""

    target: str
    drafter: str  # a model name, "lookup", or "none" for standard generation
    k: int | None  # None: adaptive
    p_min: float
    draft_top_k: int
    temperature: float
    top_k: int
    seed: int | None
    max_tokens: int

    @property
    def speculative(self) -> bool:
        return self.drafter != NONE

    def decoder_settings(self, settings: Settings) -> Settings:
        engine = settings.engine.model_copy(update={"p_min": self.p_min, "draft_top_k": self.draft_top_k})
        return settings.model_copy(update={"engine": engine})

    def request(self, messages: list[dict[str, str]]) -> GenerationRequest:
        options = SamplingOptions(temperature=self.temperature, top_k=self.top_k, seed=self.seed)
        return GenerationRequest(messages=messages, options=options, max_tokens=self.max_tokens, k=self.k)


@st.cache_data(ttl=600, show_spinner="Reading the tokenizers of the server's models…")
def drafter_relations(_settings: Settings, url: str, target: str, models: tuple[str, ...]) -> dict[str, str]:
    """Each model's relation to `target`: "same" | "cross" | "unusable" (a model that fails to load)."""

    async def relate(server: OllamaServer) -> dict[str, str]:
        relations = {}
        for model in models:
            try:
                relations[model] = await tokenizer_relation(server, target, server, model)
            except ServerError:
                relations[model] = "unusable"
        return relations

    return run(lambda: with_server(_settings, url, relate))


@st.cache_data(ttl=3600, show_spinner="Checking whether the server verifies in parallel…")
def parallel_check(_settings: Settings, url: str, target: str, width: int):
    return run(lambda: with_server(_settings, url, lambda server: check_parallel(_settings, server, target, width)))


def sidebar(settings: Settings) -> tuple[ServerInfo | None, Choices | None]:
    """The shared sidebar: the server and every generation setting. (None, None) if no server."""
    bar = st.sidebar
    try:
        info = server_info(settings)
    except (HostError, ServerError) as error:
        bar.error(explain(error, settings))
        return None, None
    where = "embedded llama.cpp server" if info.embedded else "Ollama"
    source = "OLLAMA_HOST" if settings.ollama_host else "started by this app"
    bar.markdown(f"**Server:** {where} at `{info.url}` ({source}), API {info.version}")
    if not info.models:
        bar.error("This server has no models: install one on the Models page, or `ollama pull` one.")
        return info, None

    default_target = settings.target_model if settings.target_model in info.models else info.models[0]
    target = bar.selectbox("Target model", info.models, index=info.models.index(default_target), key="target")
    if settings.target_model not in info.models:
        bar.caption(f"The configured target {settings.target_model} is not on this server: install it on the "
                    "Models page (embedded server) or `ollama pull` it.")
    speculative = bar.toggle("Speculative decoding", value=True, key="speculative")
    _parallel_note(settings, info, target)

    drafter, k = NONE, None
    if speculative:
        relations = {LOOKUP: LOOKUP, **drafter_relations(settings, info.url, target, tuple(info.models))}
        options = list(relations)
        wanted = settings.draft_model if relations.get(settings.draft_model) in ("same", "cross") else LOOKUP
        drafter = bar.selectbox("Drafter", options, index=options.index(wanted), key="drafter",
                                format_func=lambda name: f"{name} — {RELATION_LABELS[relations[name]]}")
        if relations[drafter] == "unusable":
            bar.warning(f"{drafter} cannot draft for {target}: answers use standard generation until you pick "
                        "another drafter.")
            drafter = NONE
        elif relations[drafter] != LOOKUP and info.version_tuple < LOGPROBS_SINCE and not info.embedded:
            bar.warning(f"Draft models need Ollama {'.'.join(map(str, LOGPROBS_SINCE))} or newer (log-probabilities); "
                        "upgrade Ollama or use prompt lookup.")
        length = bar.select_slider("Draft length K", ["auto", *range(1, settings.engine.k_max + 1)], value="auto",
                                   key="draft_length", help="auto: the controller picks K from measured speeds")
        k = None if length == "auto" else int(length)
    p_min = bar.slider("p_min (stop drafting below this probability)", 0.0, 1.0, settings.engine.p_min, 0.05,
                       key="p_min", disabled=not speculative)
    draft_top_k = bar.slider("Draft top-k (candidates read per position)", 1, 20, settings.engine.draft_top_k,
                             key="draft_top_k", disabled=not speculative)
    temperature = bar.slider("Temperature", 0.0, 2.0, 0.0, 0.05, key="temperature",
                             help="0 is greedy: speculative output then equals standard output exactly")
    top_k = bar.number_input("Top-k (sampling)", 0, 200, 40, key="top_k")
    seed = bar.number_input("Seed", min_value=0, value=None, step=1, key="seed", placeholder="random")
    max_tokens = bar.number_input("Max tokens", 1, 8192, 256, key="max_tokens")
    return info, Choices(target, drafter, k, p_min, draft_top_k, temperature, int(top_k),
                         None if seed is None else int(seed), int(max_tokens))


def _parallel_note(settings: Settings, info: ServerInfo, target: str) -> None:
    """Speculation pays only where the K+1 verification requests of a round run in parallel."""
    width = settings.engine.k_max + 1
    if info.embedded:
        if info.batches:
            st.sidebar.caption("Parallel verification: yes — the embedded server batches the nested verification "
                               "requests itself.")
        else:
            st.sidebar.warning("Parallel verification: no — this embedded server evaluates requests one at a time "
                               "(started with --no-batch), so speculation cannot pay. Fix: restart it without "
                               "--no-batch.")
        return
    try:
        check = parallel_check(settings, info.url, target, width)
    except ServerError as error:
        st.sidebar.caption(f"Parallel verification: not checked ({explain(error)})")
        return
    measured = (f"{check.width} verification requests took {check.concurrent_seconds:.2f} s at once and "
                f"{check.sequential_seconds:.2f} s one after another")
    if check.parallel:
        st.sidebar.caption(f"Parallel verification: yes ({measured}).")
    else:
        st.sidebar.warning(f"Parallel verification: no — this Ollama runs verification requests one after another "
                           f"({measured}), so speculation cannot pay. Fix: set OLLAMA_NUM_PARALLEL to at least "
                           f"K+1 = {width} where Ollama runs, and restart it.")


def current() -> tuple[Settings, ServerInfo | None, Choices | None]:
    """What app.py put in the session for the page being shown."""
    return get_settings(), st.session_state.get("server"), st.session_state.get("choices")


def require_server() -> tuple[Settings, ServerInfo, Choices]:
    settings, info, choices = current()
    if info is None or choices is None:
        st.info("No usable server or model: see the message in the sidebar.")
        st.stop()
    return settings, info, choices


# -- baselines -----------------------------------------------------------------------------------------


def baseline_text(baseline: dict[str, Any] | None) -> str:
    if not baseline:
        return "no baseline measured yet"
    return (f"standard baseline {baseline['tokens_per_second']:.1f} tokens/s ({baseline['how']}, "
            f"{when(baseline['measured_at'])})")


def speedup_text(stats: dict[str, Any], baseline: dict[str, Any] | None) -> str:
    if stats.get("mode") == "standard":
        return "standard answer (used as the baseline)"
    if not baseline:
        return "speed-up: no baseline measured yet"
    speedup = stats["tokens_per_second"] / baseline["tokens_per_second"]
    return f"speed-up ×{speedup:.2f} against {baseline_text(baseline)}"


def remember_baseline(conversations: ConversationStore, url: str, stats: dict[str, Any], how: str) -> None:
    """A finished standard answer is the newest baseline for its server and target."""
    if stats.get("mode") == "standard" and stats.get("output_tokens", 0) > 1 and stats.get("tokens_per_second"):
        what = f"{how}, {stats['output_tokens']} tokens"
        conversations.set_baseline(url, stats["target"], stats["tokens_per_second"], what)


def measure_baseline(settings: Settings, url: str, target: str) -> dict[str, Any]:
    """A short greedy standard generation, timed like any answer; saved as the baseline."""

    async def generate(server: OllamaServer) -> dict[str, Any]:
        decoder = await build_decoder(settings.engine, server, target, NONE)
        request = GenerationRequest(prompt=BASELINE_PROMPT, max_tokens=BASELINE_MAX_TOKENS)
        async for event in decoder.stream(request):
            if isinstance(event, DoneEvent):
                return event.stats.model_dump()
        raise RuntimeError("the decoder ended without a result")

    stats = run(lambda: with_server(settings, url, generate))
    conversations = store(settings)
    remember_baseline(conversations, url, stats, "'Measure baseline': a standard answer to a fixed prompt")
    return conversations.baseline(url, target) or {}


# -- streaming an answer -------------------------------------------------------------------------------


@dataclass
class Answer:
    text: str = ""
    pieces: list[list[str]] = field(default_factory=list)
    stats: dict[str, Any] | None = None
    note: str | None = None  # why it stopped early, or why it has no text at all
    fallbacks: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.stats is None


async def answer_events(settings: Settings, url: str, target: str, drafter: str,
                        request: GenerationRequest) -> AsyncIterator[Event]:
    """The engine's events for one answer; the server client lives and dies with this generator."""
    server = open_server(settings, url)
    try:
        decoder = await build_decoder(settings.engine, server, target, drafter)
        async for event in decoder.stream(request):
            yield event
    finally:
        await server.aclose()


def pieces_html(pieces: list[list[str]]) -> str:
    """The answer as HTML, accepted draft tokens on a green background; every piece escaped."""
    spans = "".join(
        f'<span style="background-color: {DRAFT_COLOUR}; border-radius: 2px">{html.escape(text)}</span>'
        if origin == "draft" else html.escape(text)
        for text, origin in pieces
    )
    return f'<div style="white-space: pre-wrap; line-height: 1.6">{spans}</div>'


def show_text(slot, text: str, pieces: list[list[str]] | None, highlight: bool, cursor: bool = False) -> None:
    """Draw an answer in `slot` (a placeholder or container): highlighted HTML, or Markdown."""
    if highlight and pieces:
        slot.html(pieces_html(pieces + ([["▌", "standard"]] if cursor else [])))
    elif text or cursor:
        slot.markdown(text + ("▌" if cursor else ""))
    else:
        slot.caption("(no text)")


def stream_answer(settings: Settings, url: str, choices: Choices, request: GenerationRequest, *,
                  highlight: bool = False, baseline: dict[str, Any] | None = None, charts: bool = True,
                  drafter: str | None = None) -> Answer:
    """Run one answer, drawing it in the current container as it is accepted, with live charts."""
    drafter = choices.drafter if drafter is None else drafter
    answer = Answer()
    text_slot, notices, chart_slot = st.empty(), st.container(), st.empty()
    drawn_at = 0.0
    show_text(text_slot, "", [], highlight, cursor=True)
    events = answer_events(choices.decoder_settings(settings), url, choices.target, drafter, request)
    try:
        # closing(): if Streamlit stops the script mid-answer, the stream and its HTTP client close now.
        with closing(iterate(events)) as stream:
            for event in stream:
                if isinstance(event, TextEvent):
                    answer.pieces.append([event.text, event.origin])
                    answer.text += event.text
                    show_text(text_slot, answer.text, answer.pieces, highlight, cursor=True)
                elif isinstance(event, RoundEvent):
                    if charts and time.monotonic() - drawn_at > CHART_REFRESH_SECONDS:
                        live = event.stats.snapshot(event.record.at_seconds)
                        chart_slot.plotly_chart(answer_figure(live.model_dump(), baseline), key=_chart_key())
                        drawn_at = time.monotonic()
                elif isinstance(event, FallbackEvent):
                    answer.fallbacks.append(event.reason)
                    notices.warning(f"{event.reason[:1].upper()}{event.reason[1:]}.")  # says what happened next
                elif isinstance(event, DoneEvent):
                    answer.text, answer.stats = event.text, event.stats.model_dump()
    except GenerationError as error:
        answer.text = error.partial
        kept = "the partial text was kept" if error.partial else "no text was generated"
        answer.note = f"The answer stopped early: {explain(error, settings)} ({kept})"
    except (ServerError, HostError) as error:
        answer.note = explain(error, settings)
    show_text(text_slot, answer.text, answer.pieces, highlight)
    if answer.stats and answer.stats["done_reason"] == "length":
        hit_limit = 0 < request.max_tokens <= answer.stats["output_tokens"]
        if not hit_limit:  # "length" before max_tokens: the server ran out of context
            answer.note = explain(ServerError("the context is full"), settings)
    if answer.note:
        notices.error(answer.note)
    if charts and answer.stats:
        chart_slot.plotly_chart(answer_figure(answer.stats, baseline), key=_chart_key())
    elif charts:
        chart_slot.empty()
    return answer


_chart_numbers = itertools.count()


def _chart_key() -> str:
    """A fresh key per live chart update: two identical figures in one run would otherwise clash."""
    return f"live-chart-{next(_chart_numbers)}"


def show_message(message: dict[str, Any], highlight: bool, charts: bool = False) -> None:
    """One stored message, as st.chat_message, with its stats one click away."""
    with st.chat_message(message["role"]):
        show_text(st.container(), message["content"], message.get("pieces"), highlight)
        stats = message.get("stats")
        for fallback in (stats or {}).get("fallbacks", []):
            st.info(f"After {fallback['at_token']} tokens, {fallback['reason']}.")
        if message.get("note"):
            st.warning(message["note"])
        if stats:
            st.caption(f"{stats_summary(stats)} · {speedup_text(stats, message.get('baseline'))}")
            if charts:
                st.plotly_chart(answer_figure(stats, message.get("baseline")))
            with st.expander("Stats"):
                st.json(stats, expanded=1)


# -- charts --------------------------------------------------------------------------------------------


def answer_figure(stats: dict[str, Any], baseline: dict[str, Any] | None) -> go.Figure:
    """Acceptance per round and per draft position, and tokens/s over time against the baseline.

    `stats` is an AnswerStats as a dict, finished or live (rounds so far)."""
    rounds = stats.get("rounds", [])
    speculative = stats.get("mode") == "speculative"
    titles = (["Draft tokens per round", "Acceptance by draft position"] if speculative else []) + ["Tokens/s"]
    figure = make_subplots(rows=1, cols=len(titles), subplot_titles=titles)
    if speculative:
        drafted = [(number, r) for number, r in enumerate(rounds, start=1) if r["k"] and r["drafted"]]
        numbers = [number for number, _ in drafted]
        figure.add_bar(x=numbers, y=[r["accepted"] for _, r in drafted], name="accepted",
                       marker_color=ACCEPTED_COLOUR, row=1, col=1)
        figure.add_bar(x=numbers, y=[r["drafted"] - r["accepted"] for _, r in drafted], name="rejected",
                       marker_color=REJECTED_COLOUR, row=1, col=1)
        positions = stats.get("per_position_acceptance", [])
        figure.add_bar(x=list(range(1, len(positions) + 1)), y=positions, name="accepted share",
                       marker_color="rgba(31, 119, 180, 0.8)", showlegend=False, row=1, col=2)
        figure.update_yaxes(range=[0, 1], tickformat=".0%", row=1, col=2)
        figure.update_xaxes(title_text="round", row=1, col=1)
        figure.update_xaxes(title_text="position", dtick=1, row=1, col=2)
    times, rates, tokens = [], [], 0
    for record in rounds:
        tokens += record["emitted"]
        if record["at_seconds"] > 0:
            times.append(record["at_seconds"])
            rates.append(tokens / record["at_seconds"])
    column = len(titles)
    figure.add_scatter(x=times, y=rates, mode="lines+markers", name="tokens/s", row=1, col=column)
    figure.update_xaxes(title_text="seconds", row=1, col=column)
    if baseline:
        figure.add_hline(y=baseline["tokens_per_second"], line_dash="dash", line_color="grey",
                         annotation_text="standard baseline", row=1, col=column)
    headline = "standard generation"
    if speculative:
        headline = "speed-up: no baseline measured yet"
        if baseline and rates:
            speedup = rates[-1] / baseline["tokens_per_second"]
            headline = f"speed-up so far ×{speedup:.2f} against the standard baseline"
    figure.update_layout(barmode="stack", height=280, margin=dict(l=10, r=10, t=60, b=10), title=headline,
                         title_font_size=14, legend=dict(orientation="h", y=-0.3))
    return figure


# -- chat: conversations and the baseline ------------------------------------------------------------


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


# -- compare -------------------------------------------------------------------------------------------


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
    if standard["stats"]["tokens_per_second"]:
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


# -- models --------------------------------------------------------------------------------------------


def server_models(settings: Settings, url: str) -> list[dict[str, Any]]:
    """The server's models with their sizes, as `ollama list` shows them."""

    async def listing(server: OllamaServer) -> list[dict[str, Any]]:
        return [
            {"model": m.get("model", ""), "size (MB)": round((m.get("size") or 0) / 1e6),
             "parameters": (m.get("details") or {}).get("parameter_size", ""),
             "quantization": (m.get("details") or {}).get("quantization_level", "")}
            for m in await server.list_models()
        ]

    try:
        return run(lambda: with_server(settings, url, listing, timeout=settings.engine.connect_timeout * 2))
    except ServerError as error:
        raise ServerError(f"cannot list the models of {url}: {error.message}") from None


def bundled_models(settings: Settings) -> list[dict[str, Any]]:
    from utils.embedded.models import ModelStore

    models = ModelStore(settings.models_dir)
    return [
        {"model": name, "size (MB)": round(spec.size / 1e6), "installed": models.is_installed(name),
         "description": spec.description}
        for name, spec in models.catalogue.items()
    ]


def install_models(settings: Settings, names: list[str]) -> None:
    """Install bundled models, showing each step and the share of parts downloaded."""
    from utils.embedded.models import ModelError, ModelStore

    models = ModelStore(settings.models_dir)
    bar = st.progress(0.0, text="Starting…")
    with st.status(f"Installing {', '.join(names)}…", expanded=True) as status:
        for number, name in enumerate(names):
            parts = len(models.spec(name).parts)

            def progress(line: str, number: int = number, parts: int = parts) -> None:
                status.write(line)
                if match := re.search(r"\[(\d+)/(\d+)\]", line):
                    done = number + int(match.group(1)) / max(parts, 1)
                    bar.progress(min(done / len(names), 1.0), text=line)

            try:
                models.install(name, progress=progress)
            except ModelError as error:
                status.update(label=f"Installing {name} failed", state="error")
                st.error(f"{error}. Check the network connection and try again; finished parts are kept.")
                return
        bar.progress(1.0, text="Done")
        status.update(label=f"Installed {', '.join(names)}", state="complete", expanded=False)
    st.cache_data.clear()  # the server's model list and the tokenizer relations changed


def run_advisor(settings: Settings, url: str, target: str, drafters: list[str], prompts: tuple[str, ...],
                max_tokens: int):
    """The pair advisor, with a progress bar."""
    from utils.bench.advisor import advise

    bar = st.progress(0.0, text="Starting…")

    def progress(done: int, total: int, label: str) -> None:
        bar.progress(done / total if total else 1.0, text=f"Measuring {label} ({done}/{total})")

    return run(lambda: with_server(settings, url, lambda server: advise(
        settings, server, target, drafters, prompts=prompts, max_tokens=max_tokens, progress=progress)))


def advice_table(advice) -> list[dict[str, Any]]:
    rows = []
    for measured in [advice.standard, *advice.candidates]:
        rows.append({
            "drafter": measured.drafter,
            "kind": RELATION_LABELS.get(measured.relation, measured.relation),
            "tokens/s": round(measured.tokens_per_second, 1) if not measured.error else None,
            "acceptance": None if measured.acceptance_rate is None else round(measured.acceptance_rate, 2),
            "tokens per verification": (None if measured.mean_acceptance_length is None
                                        else round(measured.mean_acceptance_length, 2)),
            "same text as standard": measured.identical,
            "problem": measured.error or "",
        })
    return rows
