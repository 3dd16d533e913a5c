"""The shared sidebar: which server is in use, whether it verifies in parallel, and every setting of an
answer (target, drafter, draft length, sampling), returned as `Choices`."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TypeVar

import streamlit as st

from config import Settings
from utils.app.preferences import Preferences
from utils.app.runtime import ServerInfo, app_server, engine_memory, explain, run, server, server_info, store
from utils.bench.advisor import check_parallel
from utils.engine.client import LOGPROBS_SINCE, ServerError
from utils.engine.config import EngineConfig
from utils.engine.drafters import NONE, model_free_drafters
from utils.engine.drafters.suffix import SUFFIX
from utils.engine.model_info import model_info
from utils.engine.planning import standard_reason, verification_gate
from utils.engine.request import GenerationRequest
from utils.engine.tokenizers import tokenizer_relation
from utils.errors import SpecError
from utils.hosts import HostError
from utils.proxy.pairs import PairError, parse_pairs
from utils.sampling import SamplingOptions

RELATION_LABELS = {"same": "same tokenizer", "cross": "cross-tokenizer", "unusable": "unusable"}
USABLE = ("same", "cross")
T = TypeVar("T")


def default_drafter(settings: Settings, target: str, usable: Collection[str]) -> str:
    """The drafter `cli.py serve` speculates `target` with: the one SPEC_PAIRS pairs it with, where it
    can draft here, else suffix decoding (it needs no model, learns from every answer, and pays on this
    CPU where a draft model does not: docs/performance.md). Not the configured draft model: a default
    that does not pay was written off by the controller on the first answer (issue 44)."""
    try:
        paired = parse_pairs([p for p in settings.pairs.split(",") if p.strip()]).get(target)
    except PairError:
        paired = None  # serve refuses to start on it; here the default is the one that needs nothing
    return paired if paired is not None and paired in usable else SUFFIX


def relation_label(relation: str) -> str:
    """How a drafter relates to the target, in words; model-free drafters describe themselves."""
    return RELATION_LABELS.get(relation) or model_free_drafters().get(relation, relation)


@dataclass
class Choices:
    """What the sidebar asks for an answer."""

    target: str
    drafter: str  # a model name, a model-free drafter ("lookup"), or "none" for standard generation
    k: int | None  # None: adaptive
    p_min: float
    draft_top_k: int
    temperature: float
    top_k: int
    seed: int | None
    max_tokens: int
    think: bool | None = None  # a thinking model's switch; None: the model has none

    @property
    def speculative(self) -> bool:
        return self.drafter != NONE

    def decoder_settings(self, settings: Settings) -> Settings:
        return settings.with_engine(p_min=self.p_min, draft_top_k=self.draft_top_k)

    def request(self, messages: list[dict[str, str]], engine: EngineConfig | None = None) -> GenerationRequest:
        options = SamplingOptions(temperature=self.temperature, top_k=self.top_k, seed=self.seed).to_ollama()
        context = engine.context_options() if engine else {}
        return GenerationRequest(messages=messages, options={**options, **context}, max_tokens=self.max_tokens,
                                 k=self.k, think=self.think)


@st.cache_data(ttl=600, show_spinner="Reading the tokenizers of the server's models…")
def drafter_relations(_settings: Settings, url: str, target: str, models: tuple[str, ...]) -> dict[str, str]:
    """Each model's relation to `target`: "same" | "cross" | "unusable" (a model that fails to load) |
    "larger" (at least the target's size: it cannot guess faster than the target writes, as a copy of
    the target under another name, left over from a Modelfile, cannot)."""
    client = server(_settings, url)

    async def relate() -> dict[str, str]:
        sizes = {m.get("model"): m.get("size") or 0 for m in await client.list_models()}
        relations = {}
        for model in models:
            if sizes.get(target) and sizes.get(model, 0) >= sizes[target]:
                relations[model] = "larger"
                continue
            try:
                relations[model] = await tokenizer_relation(client, target, client, model)
            except ServerError:
                relations[model] = "unusable"
        return relations

    return run(relate)


@st.cache_data(ttl=600, show_spinner=False)
def thinking_model(_settings: Settings, url: str, target: str) -> bool:
    """Whether `target` thinks (capability `thinking`): the sidebar then offers its switch."""
    client = server(_settings, url)

    async def check() -> bool:
        try:
            return (await model_info(client, target, client.described)).thinks
        except ServerError:
            return False

    return run(check)


@st.cache_data(ttl=600, show_spinner="Checking whether this server can verify drafts for the model…")
def standard_why(_settings: Settings, url: str, target: str, think: bool | None) -> str | None:
    """Why no answer of `target` on this server can be speculated (a thinking model whose answers the
    server splits with a built-in parser, model parameters speculation does not keep exact, a server
    whose one-token answers cannot verify drafts: utils/engine/planning.py), or None. The same
    reasons go with each answer's notes and the proxy's /metrics."""
    client = server(_settings, url)

    async def check() -> str | None:
        try:
            info = await model_info(client, target, client.described)
            own = None if await client.is_embedded() else info.thinking_parser  # as the engine's plan asks
            if why := standard_reason(info, None, think, thinking_parser=own):
                return why[1]
            return await verification_gate(client, info, _settings.engine.context_options(), engine_memory())
        except ServerError:
            return None  # the answer itself reports what failed

    return run(check)


@st.cache_data(ttl=3600, show_spinner="Checking whether the server verifies in parallel…")
def parallel_check(_settings: Settings, url: str, target: str, width: int):
    client = server(_settings, url)
    return run(lambda: check_parallel(_settings, client, target, width))


# The sidebar settings an example prompt changes for its one answer, and that come back after it.
EXAMPLE_SETTINGS = ("speculative", "target", "drafter")


def use_for_one_answer(changes: dict[str, object]) -> None:
    """Set sidebar widgets (from a callback, before they are drawn) for the next answer only: the values
    they had come back once it is saved (`restore_after_answer`)."""
    state = st.session_state
    state.restore_after_answer = {key: state[key] for key in changes if key in state}
    for key, value in changes.items():
        state[key] = value


def _initial(key: str, value: T, neutral: T) -> T:
    """The starting value for a widget that `use_for_one_answer` sets: once its key is in session state,
    Streamlit shows that value and ignores this one, and where the value there was just set, a starting
    value of the widget's own made it log a warning with a stack trace (each example click): then the
    widget's neutral default, which draws the same."""
    return neutral if key in st.session_state else value


def restore_after_answer() -> None:
    """Once no answer is asked for or streaming, the settings `use_for_one_answer` changed come back
    (before the widgets are drawn: Streamlit refuses a change to a drawn widget's value)."""
    state = st.session_state
    if state.get("streaming") is None and (saved := state.pop("restore_after_answer", None)):
        for key, value in saved.items():
            state[key] = value


def sidebar(settings: Settings) -> tuple[ServerInfo | None, Choices | None]:
    """The shared sidebar: the server and every generation setting. (None, None) if no server."""
    restore_after_answer()
    bar = st.sidebar
    try:
        info = server_info(settings)
    except SpecError as error:
        bar.error(explain(error, settings))
        _restart_button(settings)
        return None, None
    keeper = app_server(settings)
    source = f"started by this app, pid {keeper.pid}" if keeper.owns_server else "OLLAMA_HOST"
    # The version is what the server's /api/version says: the embedded server's own, not an Ollama release.
    where = (f"this project's embedded llama.cpp server (version {info.version})" if info.embedded
             else f"Ollama {info.version}")
    bar.markdown(f"**Server:** {where} at `{info.url}` ({source})")
    if keeper.restarts:
        last = keeper.restarts[-1]
        bar.caption(f"The embedded server {last.why} at {last.at:%H:%M:%S}; the app started it again "
                    f"({len(keeper.restarts)} restart{'s' if len(keeper.restarts) > 1 else ''} so far).")
    if not info.models:
        bar.error("This server has no models: install one on the Models page, or `ollama pull` one.")
        return info, None

    remembered = Preferences(store(settings))
    default_target = settings.target_model if settings.target_model in info.models else info.models[0]
    target = bar.selectbox("Target model", info.models, key="target",
                           index=_initial("target", remembered.index("target", info.models, default_target), 0))
    if settings.target_model not in info.models:
        bar.caption(f"The configured target {settings.target_model} is not on this server: install it on the "
                    "Models page (embedded server) or `ollama pull` it.")
    speculative = bar.toggle("Speculative decoding", key="speculative",
                             value=_initial("speculative", remembered.default("speculative", True), False),
                             help="a drafter guesses the next tokens and the target checks them all at once")
    _parallel_note(settings, info, target)
    think = None
    if thinking_model(settings, info.url, target):
        think = bar.toggle("Think", value=remembered.default("think", True), key="think",
                           help="the model reasons before it answers (shown folded above the answer); the "
                                "reasoning is speculated as the answer is, and counted apart")
    if speculative and (why := standard_why(settings, info.url, target, think)):
        bar.warning(f"Answers of {target} are generated standard here: {why}.")

    drafter, k = NONE, None
    if speculative:
        model_free = list(model_free_drafters())
        # Only drafters that can draft for this target: not the target itself, nor a model whose tokenizer
        # cannot be read or matched (a model that fails to load, one left over from another task).
        models = tuple(model for model in info.models if model != target)
        related = drafter_relations(settings, info.url, target, models)
        relations = {**{name: name for name in model_free},
                     **{name: relation for name, relation in related.items() if relation in USABLE}}
        options = list(relations)
        wanted = default_drafter(settings, target, options)
        if st.session_state.get("drafter", wanted) not in options:  # the new target's self, or not usable
            del st.session_state["drafter"]  # then the default, not the first in the list
        drafter = bar.selectbox("Drafter", options, key="drafter",
                                index=_initial("drafter", remembered.index("drafter", options, wanted), 0),
                                help="where the guessed tokens come from: the prompt itself, or a smaller model")
        larger = sorted(name for name, relation in related.items() if relation == "larger")
        unusable = sorted(name for name, relation in related.items() if relation == "unusable")
        bar.caption(f"{drafter}: {relation_label(relations[drafter])}"
                    + (f" · not offered, not smaller than {target}: {', '.join(larger)}" if larger else "")
                    + (f" · not offered, cannot draft for {target}: {', '.join(unusable)}" if unusable else ""))
        if drafter not in model_free and info.version_tuple < LOGPROBS_SINCE and not info.embedded:
            bar.warning(f"Draft models need Ollama {'.'.join(map(str, LOGPROBS_SINCE))} or newer (log-probabilities); "
                        "upgrade Ollama or use a drafter that needs no model.")
    max_tokens = bar.number_input("Max tokens", 1, 8192, remembered.default("max_tokens", 256), key="max_tokens",
                                  help="the longest answer, in tokens")
    with bar.expander("Advanced settings", icon=":material/tune:"):
        lengths = ["auto", *range(1, settings.engine.k_max + 1)]
        length = st.select_slider("Draft length K", lengths, value=remembered.default("draft_length", "auto", lengths),
                                  key="draft_length", disabled=not speculative,
                                  help="tokens drafted per round; auto: the controller picks K from measured speeds")
        k = None if length == "auto" or not speculative else int(length)
        p_min = st.slider("p_min (stop drafting below this probability)", 0.0, 1.0,
                          remembered.default("p_min", settings.engine.p_min), 0.05, key="p_min",
                          disabled=not speculative)
        draft_top_k = st.slider("Draft top-k (candidates read per position)", 1, 20,
                                remembered.default("draft_top_k", settings.engine.draft_top_k), key="draft_top_k",
                                disabled=not speculative)
        temperature = st.slider("Temperature", 0.0, 2.0, remembered.default("temperature", 0.0), 0.05,
                                key="temperature",
                                help="0 is greedy: speculative output then equals standard output exactly")
        top_k = st.number_input("Top-k (sampling)", 0, 200, remembered.default("top_k", 40), key="top_k")
        seed = st.number_input("Seed", min_value=0, value=remembered.default("seed", None), step=1, key="seed",
                               placeholder="random")
    remembered.keep()
    return info, Choices(target, drafter, k, p_min, draft_top_k, temperature, int(top_k),
                         None if seed is None else int(seed), int(max_tokens), think)


def _restart_button(settings: Settings) -> None:
    """Where the app runs the server itself, a button that starts it again (the app also does so on
    its own whenever it finds the server dead)."""
    keeper = app_server(settings)
    if not keeper.owns_server:
        return
    if st.sidebar.button("Restart the embedded server", icon=":material/restart_alt:", key="restart_server"):
        try:
            with st.spinner("Starting the embedded server…"):
                keeper.restart()
        except HostError as error:
            st.sidebar.error(explain(error, settings))
            return
        st.rerun()


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
