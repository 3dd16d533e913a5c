"""The Streamlit app, page by page, on the real embedded server (streamlit.testing.v1.AppTest).

Every test opens the app with OLLAMA_HOST pointing at the test session's server, a fresh data folder,
and the smallest model as target, with short answers to keep the suite quick on two cores.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
from pathlib import Path

import pytest
import streamlit.testing.v1.app_test as app_test
from streamlit.runtime.pages_manager import PagesManager
from streamlit.testing.v1 import AppTest

import config
from tests.conftest import SMALL
from utils.app.store import ConversationStore
from utils.bench.advisor import check_parallel
from utils.embedded.server import EmbeddedServer
from utils.engine.client import OllamaServer

ROOT = Path(__file__).resolve().parents[1]
RUN_TIMEOUT = 240  # seconds for one script run; answers are short but the CPU is shared
MAX_TOKENS = 16
REPEAT_PROMPT = "Repeat this sentence exactly: The quick brown fox jumps over the lazy dog."


class NavigationPagesManager(PagesManager):
    """AppTest forgets before every run that the app uses st.navigation, and because a pages/ folder
    exists it runs every run after the first as an old-style multipage app: the page file alone,
    without app.py and its sidebar. Streamlit's server turns that mode off for good at the first
    st.navigation call; this does the same for AppTest."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        PagesManager.uses_pages_directory = False


@pytest.fixture(autouse=True)
def navigation_app(monkeypatch):
    monkeypatch.setattr(app_test, "PagesManager", NavigationPagesManager)


@pytest.fixture
def data_dir(server_url, tmp_path, monkeypatch) -> Path:
    """The app's environment: the test server, a fresh data folder, the small target."""
    monkeypatch.setenv("OLLAMA_HOST", server_url)
    monkeypatch.setenv("SPEC_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPEC_TARGET_MODEL", SMALL)
    config.get_settings.cache_clear()
    yield tmp_path / "data"
    config.get_settings.cache_clear()


def open_app(page: str | None = None) -> AppTest:
    """A new browser session: nothing in st.session_state, everything else from the data folder."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=RUN_TIMEOUT).run()
    assert not at.exception, at.exception
    if page:
        at.switch_page(page).run()
        assert not at.exception, at.exception
    return at


def short_answers(at: AppTest, speculative: bool = True, drafter: str = "lookup", k: int | str = 4) -> None:
    """Sidebar settings for a quick answer. A fixed K makes the first answer speculate at once; the
    adaptive controller would first measure standard speed."""
    at.sidebar.toggle(key="speculative").set_value(speculative).run()
    if speculative:
        at.sidebar.selectbox(key="drafter").set_value(drafter)
        at.sidebar.select_slider(key="draft_length").set_value(k)
    at.sidebar.number_input(key="max_tokens").set_value(MAX_TOKENS)


def answer_texts(at: AppTest) -> list[str]:
    """The visible text of each assistant message (Markdown, or HTML when highlighting)."""
    texts = []
    for message in at.chat_message:
        if message.name == "assistant":
            texts.append("".join([m.value for m in message.markdown] + [h.value for h in message.get("html")]))
    return texts


def test_sidebar_shows_the_server_and_the_drafters(data_dir):
    at = open_app()
    sidebar_text = " ".join(m.value for m in at.sidebar.markdown) + " ".join(c.value for c in at.sidebar.caption)
    assert "embedded llama.cpp server" in sidebar_text and "OLLAMA_HOST" in sidebar_text
    assert "batches the nested verification requests" in sidebar_text
    assert at.sidebar.selectbox(key="target").value == SMALL
    labels = at.sidebar.selectbox(key="drafter").options  # as shown: names, the unusable ones marked
    assert "lookup" in labels and "qwen2.5-coder:0.5b" in labels
    # The target cannot draft for itself: listed, but marked unusable.
    assert f"{SMALL} (unusable)" in labels
    # What the chosen drafter is, in words, under the box: the configured draft model by default.
    assert at.sidebar.selectbox(key="drafter").value == "qwen2.5-coder:0.5b"
    assert "qwen2.5-coder:0.5b: cross-tokenizer" in sidebar_text
    at.sidebar.selectbox(key="drafter").set_value("lookup").run()
    assert "lookup: prompt lookup, no model" in " ".join(c.value for c in at.sidebar.caption)


@pytest.fixture(scope="module")
def serial_server_url(tmp_path_factory) -> str:
    """An embedded server that evaluates one request at a time, like Ollama with OLLAMA_NUM_PARALLEL=1."""
    server = EmbeddedServer(log_path=tmp_path_factory.mktemp("serial") / "server.log", batch=False)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def test_sidebar_on_a_serial_server_says_how_to_fix_it(data_dir, serial_server_url, monkeypatch):
    monkeypatch.setenv("OLLAMA_HOST", serial_server_url)
    config.get_settings.cache_clear()
    at = open_app()
    [warning] = at.sidebar.warning
    assert "Parallel verification: no" in warning.value and "restart it without --no-batch" in warning.value


def test_parallel_check_measures_both_ways(serial_server_url):
    """The check Ollama servers get (the embedded one says whether it batches). Its verdict is a
    timing, too noisy to assert on a shared two-core machine; the measurement itself must work."""
    settings = config.Settings()

    async def check():
        server = OllamaServer(serial_server_url)
        try:
            return await check_parallel(settings, server, SMALL, width=3, rounds=1)
        finally:
            await server.aclose()

    result = asyncio.run(check())
    assert result.width == 3 and result.sequential_seconds > 0 and result.concurrent_seconds > 0
    assert result.parallel == (result.concurrent_seconds < 0.6 * result.sequential_seconds)


def test_chat_standard_then_speculative_persists_across_reload(data_dir):
    at = open_app()
    assert "no baseline measured yet" in " ".join(c.value for c in at.sidebar.caption)

    # A standard answer: it becomes the baseline for this server and target.
    short_answers(at, speculative=False)
    at.chat_input[0].set_value(REPEAT_PROMPT).run()
    assert not at.exception, at.exception
    assert len(answer_texts(at)) == 1 and answer_texts(at)[0].strip()
    assert "standard baseline" in " ".join(c.value for c in at.sidebar.caption)

    # A speculative answer: streamed, saved with its stats, a chart and a measured speed-up.
    short_answers(at, speculative=True)
    at.chat_input[0].set_value(REPEAT_PROMPT).run()
    assert not at.exception, at.exception
    texts = answer_texts(at)
    assert len(texts) == 2 and texts[1].strip()
    assert [e.label for e in at.expander].count("Stats") == 2
    assert at.get("plotly_chart"), "the last answer has its charts"
    assert any("speed-up ×" in c.value for c in at.caption)
    assert any(json.loads(j.value)["mode"] == "speculative" for j in at.json)

    # A reload is a new session: the conversation is listed and shown from the database.
    reloaded = open_app()
    stored = ConversationStore(data_dir / "conversations.sqlite3")
    [conversation] = stored.conversations()
    assert conversation_buttons(reloaded) == [(REPEAT_PROMPT, True)]
    assert answer_texts(reloaded) == texts
    roles = [m["role"] for m in stored.messages(conversation["id"])]
    assert roles == ["user", "assistant", "user", "assistant"]


def test_server_down_says_what_to_do(data_dir, monkeypatch):
    monkeypatch.setenv("OLLAMA_HOST", "http://127.0.0.1:9")  # nothing listens there
    config.get_settings.cache_clear()
    stored = ConversationStore(data_dir / "conversations.sqlite3")
    kept = stored.create("kept")
    stored.add_message(kept, "user", "still here?")
    stored.add_message(kept, "assistant", "yes")
    at = open_app()
    [error] = at.sidebar.error
    assert "cannot reach the Ollama server at http://127.0.0.1:9" in error.value
    assert "unset OLLAMA_HOST" in error.value
    # The chat page says so and keeps its conversations readable, with the input off.
    assert "No usable server or model just now (see the sidebar)" in at.warning[0].value
    assert at.chat_input[0].disabled
    assert [m.markdown[0].value for m in at.chat_message] == ["still here?", "yes"]
    actions = [b for b in at.button if b.key and b.key.startswith(("regenerate-", "edit-"))]
    assert len(actions) == 2 and all(b.disabled for b in actions)
    assert "restart_server" not in [b.key for b in at.sidebar.button]  # OLLAMA_HOST's is not the app's to start


def test_chat_context_full_keeps_the_answer_with_a_note(data_dir, monkeypatch):
    monkeypatch.setenv("SPEC_NUM_CTX", "256")
    config.get_settings.cache_clear()
    at = open_app()
    short_answers(at, speculative=True)
    at.chat_input[0].set_value("Summarise this text. " + "The cat sat on the mat and looked around. " * 40).run()
    assert not at.exception, at.exception
    [note] = [w.value for w in at.warning]
    assert "no longer fits in the model's context (256 tokens)" in note
    stored = ConversationStore(data_dir / "conversations.sqlite3")
    [conversation] = stored.conversations()
    answer = stored.messages(conversation["id"])[-1]
    assert answer["role"] == "assistant" and answer["note"] == note and answer["stats"] is None


def conversation_buttons(at: AppTest) -> list[tuple[str, bool]]:
    """The conversations listed in the sidebar, top to bottom, and whether each is the open one."""
    return [(b.label, b.proto.type == "primary") for b in at.sidebar.button
            if b.key and b.key.startswith("conversation-")]


def test_chat_lists_conversations_opens_by_id_renames_deletes_after_asking_and_exports(data_dir):
    stored = ConversationStore(data_dir / "conversations.sqlite3")
    first = stored.create("same title")
    stored.add_message(first, "user", "hello")
    stored.add_message(first, "assistant", "hi <there>", pieces=[["hi", "draft"], [" <there>", "bonus"]])
    second = stored.create("same title")  # the most recent: listed first and opened by default
    stored.add_message(second, "user", "second question")

    at = open_app()
    assert conversation_buttons(at) == [("same title", True), ("same title", False)]  # two, told apart by id
    assert [m.value for m in at.chat_message[0].markdown] == ["second question"]
    at.sidebar.button(key=f"conversation-{first}").click().run()
    assert conversation_buttons(at) == [("same title", False), ("same title", True)]
    assert "hi" in answer_texts(at)[0] and "&lt;there&gt;" in answer_texts(at)[0]
    assert {b.label for b in at.get("download_button")} == {"Export as JSON", "Export as Markdown"}

    at.text_input(key=f"title-{first}").set_value("greetings")
    at.button(key="rename").click().run()
    assert stored.conversation(first)["title"] == "greetings"
    assert ("greetings", True) in conversation_buttons(at)

    # Delete asks first; Cancel keeps it.
    at.button(key="delete").click().run()
    assert "Delete “greetings” and its 2 messages? This cannot be undone." in [w.value for w in at.warning]
    assert len(stored.conversations()) == 2
    at.button(key="delete-cancel").click().run()
    assert not at.warning and len(stored.conversations()) == 2

    at.button(key="delete").click().run()
    at.button(key="delete-confirm").click().run()
    assert not at.exception, at.exception
    assert [c["id"] for c in stored.conversations()] == [second]
    assert conversation_buttons(at) == [("same title", True)]


def test_chat_new_twice_then_a_question_makes_one_conversation(data_dir):
    stored = ConversationStore(data_dir / "conversations.sqlite3")
    old = stored.create("old one")
    stored.add_message(old, "user", "hello")

    at = open_app()
    short_answers(at, speculative=False)
    at.sidebar.button(key="new").click().run()
    assert conversation_buttons(at) == [("old one", False)] and not at.chat_message
    assert "A new conversation" in " ".join(c.value for c in at.caption)
    at.sidebar.button(key="new").click().run()
    assert len(stored.conversations()) == 1, "New stores nothing"

    at.chat_input[0].set_value(REPEAT_PROMPT).run()
    assert not at.exception, at.exception
    assert [c["title"] for c in stored.conversations()] == [REPEAT_PROMPT, "old one"]
    assert conversation_buttons(at) == [(REPEAT_PROMPT, True), ("old one", False)]
    assert len(answer_texts(at)) == 1


def test_compare_runs_both_side_by_side(data_dir):
    at = open_app("pages/compare.py")
    short_answers(at, speculative=True)
    at.text_area(key="compare_prompt").set_value(REPEAT_PROMPT)
    at.button[0].click().run()
    assert not at.exception, at.exception
    assert [h.value for h in at.subheader][:2] == ["Standard", "Speculative (lookup)"]
    columns = at.columns[:2]
    for column in columns:
        assert "".join(m.value for m in column.markdown).strip(), "each column shows its answer"
    verdicts = [s.value for s in at.success] + [w.value for w in at.warning]
    assert any("identical" in v or "differ" in v for v in verdicts)
    assert [m.label for m in at.metric][-1] == "Speed-up"
    assert at.session_state.comparison["order"] == ["standard", "speculative"]
    # Three pairs (the default): the one shown, then two timed only, each in the other order.
    pairs = at.session_state.comparison["pairs"]
    assert [p["order"][0] for p in pairs] == ["standard", "speculative", "standard"]
    assert all(p["standard"]["mode"] == "standard" and p["speculative"]["drafter"] == "lookup" for p in pairs)

    at.number_input(key="compare_repeats").set_value(1)
    at.button[0].click().run()  # the next run starts with the other one
    assert not at.exception, at.exception
    assert at.session_state.comparison["order"] == ["speculative", "standard"]
    assert [c.value for c in at.caption if c.value.startswith("ran")][:2] == ["ran second", "ran first"]


def test_models_lists_installed_models_with_sizes(data_dir):
    at = open_app("pages/models.py")
    table = at.dataframe[0].value
    row = table[table["model"] == SMALL].iloc[0]
    assert row["size (MB)"] > 50


def test_models_pair_advisor_measures_and_recommends(data_dir):
    at = open_app("pages/models.py")
    at.multiselect(key="advisor_drafters").set_value(["lookup"])
    at.slider(key="advisor_prompts").set_value(1)
    at.number_input(key="advisor_tokens").set_value(12)
    at.button[0].click().run()
    assert not at.exception, at.exception
    table = at.dataframe[1].value
    assert list(table["drafter"]) == ["none", "lookup"]
    assert (table["tokens/s"] > 0).all()
    assert bool(table["same text as standard"].iloc[1]), "greedy speculation must not change the text"
    advice = at.session_state.advice
    assert len(advice.candidates[0].ratios) == 2  # one prompt, two interleaved passes
    assert table["speed-up (median)"].iloc[1].startswith("×") and "×" in table["spread (25–75%)"].iloc[1]
    verdict = (at.success or at.info)[0].value
    assert verdict.startswith(f"Recommendation for {SMALL}")
    if advice.recommended == "none":
        assert "no speculation" in verdict
    else:
        assert advice.recommended == "lookup"
        assert advice.candidates[0].tokens_per_second > advice.standard.tokens_per_second


def test_benchmarks_page_runs_a_tiny_benchmark(data_dir):
    at = open_app("pages/benchmarks.py")
    categories = at.multiselect(key="bench_categories")
    assert len(categories.options) > 1
    categories.set_value([categories.options[0]])
    at.multiselect(key="bench_drafters").set_value(["lookup"])
    assert at.number_input(key="bench_limit").value == 1 and at.number_input(key="bench_repeat").value == 2
    at.number_input(key="bench_repeat").set_value(1)
    at.number_input(key="bench_max_tokens").set_value(8).run()
    # Before it runs: its size, and no time estimate until a standard speed was measured.
    [size] = [i.value for i in at.info]
    assert size.startswith("2 answers (2 configurations, standard generation included, × 1 repeat), up to 16 tokens")
    assert "measure it (below) for a time estimate" in size
    at.button(key="bench_measure").click().run()  # one short standard answer: then a time estimate
    assert not at.exception, at.exception
    [size] = [i.value for i in at.info]
    assert re.search(r"up to 16 tokens: at most about \d+ s at \d+\.\d tokens/s\.$", size), size
    assert not [b for b in at.button if b.key == "bench_measure"]
    at.button(key="bench_start").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert at.get("plotly_chart")
    table = at.dataframe[0].value
    assert len(table) >= 1
    assert set(table["verdict"]) <= {"nothing drafted", "one run: no spread"}
    assert all(value == "—" or value.startswith("×") for value in table["speed-up (median)"])
    assert any(s.value.startswith("Benchmark saved in") for s in at.success)

    # Past runs stay listed in a new session.
    reloaded = open_app("pages/benchmarks.py")
    [run] = [s for s in reloaded.selectbox if s.label == "Run"]
    assert len(run.options) == 1 and reloaded.get("plotly_chart")


# -- support code without a page ----------------------------------------------------------------------


def test_explain_goes_by_the_kind_of_error():
    from utils.app.runtime import explain
    from utils.engine.client import ContextFull, ModelNotFound, ServerError, ServerTimeout, ServerUnreachable
    from utils.engine.events import GenerationError

    settings = config.Settings(OLLAMA_HOST="http://10.0.0.1:11434")
    assert "Start the Ollama server at OLLAMA_HOST" in explain(ServerUnreachable("no route to 10.0.0.1"), settings)
    # Without OLLAMA_HOST the app runs the server: no advice to unset a variable that is not set.
    own = config.Settings(OLLAMA_HOST=None)
    advice = explain(ServerUnreachable("connection refused"), own)
    assert "OLLAMA_HOST" not in advice and "the app starts it again" in advice
    assert "`ollama pull`" in explain(ModelNotFound("model 'x' missing"), settings)
    assert "Models page" in explain(ModelNotFound("model 'x' missing"), config.Settings(OLLAMA_HOST=None))
    assert "ollama pull" not in explain(ModelNotFound("model 'x' missing"), config.Settings(OLLAMA_HOST=None))
    assert "try again" in explain(ServerTimeout("slow"), settings)
    assert "no longer fits in the model's context" in explain(ContextFull("too long"), settings)
    # The words of a message do not decide: a plain ServerError that mentions "not found" stays as it is.
    assert explain(ServerError("file not found; connect later"), settings) == "file not found; connect later"

    def fail() -> None:
        try:
            raise ContextFull("input exceeds the context")
        except ServerError as error:
            raise GenerationError(error.message, "partial") from None

    with pytest.raises(GenerationError) as caught:
        fail()
    assert "no longer fits in the model's context" in explain(caught.value, settings)


def test_one_client_per_server_reads_the_version_once(server_url, monkeypatch):
    from utils.app import runtime

    settings = config.Settings()
    asked: list[str] = []
    original = OllamaServer._request

    async def counting(self, method, path, body=None):
        asked.append(path)
        return await original(self, method, path, body)

    monkeypatch.setattr(OllamaServer, "_request", counting)
    monkeypatch.setattr(runtime, "server_url", lambda settings: server_url)
    assert runtime.server(settings, server_url) is runtime.server(settings, server_url)
    first, second = runtime.server_info(settings), runtime.server_info(settings)
    assert first.version == second.version and SMALL in first.models
    assert asked.count("/api/version") <= 1 and asked.count("/api/tags") == 2


def speculative_stats(output: int, drafted: int, accepted: int, ks: list[int], tokens_per_second: float = 40.0,
                      drafter: str = "lookup") -> dict:
    rounds = [{"k": k, "drafted": min(k, drafted), "accepted": 0, "emitted": 1, "seconds": 0.1,
               "at_seconds": 0.1 * (n + 1)} for n, k in enumerate(ks)]
    return {"mode": "speculative", "target": SMALL, "drafter": drafter, "done_reason": "stop",
            "output_tokens": output, "drafted_tokens": drafted, "accepted_tokens": accepted,
            "drafts": 1 if drafted else 0,
            "acceptance_rate": accepted / drafted if drafted else 0.0, "tokens_per_second": tokens_per_second,
            "per_position_acceptance": [], "rounds": rounds, "fallbacks": []}


def test_chat_shows_no_speedup_where_nothing_was_drafted(data_dir):
    """A speed-up only where speculation ran: otherwise the reason, in the answer's caption."""
    stored = ConversationStore(data_dir / "conversations.sqlite3")
    baseline = {"tokens_per_second": 20.0, "how": "last standard answer in Chat", "measured_at": "2026-01-01T00:00:00"}
    conversation = stored.create("speeds")
    stored.add_message(conversation, "user", "hello")
    stored.add_message(conversation, "assistant", "x" * 127, baseline=baseline,
                       stats=speculative_stats(127, 2, 1, [4] + [0] * 20))
    stored.add_message(conversation, "user", "again")
    stored.add_message(conversation, "assistant", "short", baseline=baseline, stats=speculative_stats(3, 3, 3, [4]))
    stored.add_message(conversation, "user", "and again")
    stored.add_message(conversation, "assistant", "fine", baseline=baseline,
                       stats=speculative_stats(40, 30, 20, [4] * 8))

    at = open_app()
    captions = [c.value for c in at.caption if c.value.startswith("speculative")]
    assert len(captions) == 3, captions
    assert ("no speed-up shown: drafted 2 of 127 tokens: the controller found drafting did not pay here"
            in captions[0]) and "×" not in captions[0]
    assert "no speed-up shown: 3 tokens is too short an answer to measure a speed-up" in captions[1]
    assert "×" not in captions[1]
    assert "speed-up ×2.00 against standard baseline 20.0 tokens/s" in captions[2]


def test_compare_shows_no_speedup_where_nothing_was_drafted():
    def page():
        from tests.test_app import speculative_stats
        from utils.app.compare import show_comparison

        standard = {"mode": "standard", "target": "m", "output_tokens": 127, "tokens_per_second": 20.0,
                    "time_to_first_token_s": 0.2}
        speculative = {**speculative_stats(127, 0, 0, [0] * 10, tokens_per_second=24.0), "time_to_first_token_s": 0.2}
        show_comparison({"order": ["standard", "speculative"], "temperature": 0.0,
                         "standard": {"text": "a", "pieces": [["a", "standard"]], "stats": standard, "note": None},
                         "speculative": {"text": "a", "pieces": [["a", "standard"]], "stats": speculative,
                                         "note": None}})

    at = AppTest.from_function(page, default_timeout=60).run()
    assert not at.exception, at.exception
    assert at.metric[-1].label == "Speed-up" and at.metric[-1].value == "—"
    assert ("No speed-up shown: drafted 0 of 127 tokens: the controller found drafting did not pay here"
            in at.info[0].value)


def test_compare_shows_the_median_and_spread_of_its_pairs_and_says_within_noise():
    def page():
        from tests.test_app import speculative_stats
        from utils.app.compare import show_comparison

        def standard(tps: float) -> dict:
            return {"mode": "standard", "target": "m", "output_tokens": 100, "tokens_per_second": tps,
                    "time_to_first_token_s": 0.2}

        def drafted(tps: float) -> dict:
            return {**speculative_stats(100, 80, 60, [4] * 20, tokens_per_second=tps), "time_to_first_token_s": 0.1}

        orders = [["standard", "speculative"], ["speculative", "standard"], ["standard", "speculative"]]
        pairs = [{"order": o, "standard": standard(20.0), "speculative": drafted(tps)}
                 for o, tps in zip(orders, (26.0, 18.0, 24.0), strict=True)]
        show_comparison({"order": orders[0], "temperature": 0.0, "pairs": pairs,
                         "standard": {"text": "a", "pieces": [], "stats": pairs[0]["standard"], "note": None},
                         "speculative": {"text": "a", "pieces": [], "stats": pairs[0]["speculative"], "note": None}})

    at = AppTest.from_function(page, default_timeout=60).run()
    assert not at.exception, at.exception
    assert at.metric[-1].value == "×1.20"  # the median of ×1.30, ×0.90, ×1.20
    assert ("Speed-up over 3 pairs, each side first as often as second: median ×1.20, range ×0.90 – ×1.30 — within "
            "noise" in " ".join(c.value for c in at.caption))


def test_advisor_recommends_only_a_draft_faster_beyond_noise():
    from utils.bench.advisor import Measurement, _recommend

    standard = Measurement("none", "standard", tokens_per_second=20.0)
    lucky = Measurement("lookup", "lookup", tokens_per_second=22.0, drafted_tokens=30, ratios=[0.95, 1.3, 1.1, 0.9])
    recommended, reason = _recommend(standard, [lucky])
    assert recommended == "none" and "within noise (×0.94 – ×1.15 over 4 runs)" in reason
    steady = Measurement("lookup", "lookup", tokens_per_second=26.0, drafted_tokens=30, ratios=[1.2, 1.3, 1.25, 1.4])
    recommended, reason = _recommend(standard, [lucky, steady])
    assert recommended == "lookup" and "median ×1.27" in reason
    idle = Measurement("lookup", "lookup", tokens_per_second=30.0, ratios=[1.5, 1.5])  # drafted nothing
    assert _recommend(standard, [idle])[0] == "none"


def test_advisor_never_recommends_a_draft_that_drafted_nothing():
    from utils.app.models import advice_table, honest_advice
    from utils.bench.advisor import Advice, Measurement

    standard = Measurement("none", "standard", tokens_per_second=20.0, output_tokens=96)
    idle = Measurement("lookup", "lookup", tokens_per_second=21.0, output_tokens=96, identical=True)  # drafted nothing
    slow = Measurement("qwen2.5-coder:0.5b", "cross", tokens_per_second=15.0, output_tokens=96, acceptance_rate=0.5,
                       mean_acceptance_length=2.0, identical=True)
    advice = honest_advice(Advice(SMALL, standard, [idle, slow], recommended="lookup", reason="lookup: 21.0 tokens/s"))
    assert advice.recommended == "none"
    assert "lookup drafted nothing on these prompts" in advice.reason
    assert [row["problem"] for row in advice_table(advice)] == ["", "drafted nothing", ""]

    fast = Measurement("qwen2.5-coder:0.5b", "cross", tokens_per_second=30.0, output_tokens=96, acceptance_rate=0.7,
                       mean_acceptance_length=3.0, identical=True)
    advice = honest_advice(Advice(SMALL, standard, [idle, fast], recommended="lookup", reason="lookup: 21.0 tokens/s"))
    assert advice.recommended == "qwen2.5-coder:0.5b" and "×1.50" in advice.reason


def test_a_stopped_answer_keeps_its_text_and_the_rounds_so_far():
    from utils.app.answer_view import Answer
    from utils.engine.stats import AnswerStats, RoundRecord

    live = AnswerStats(mode="speculative", target=SMALL, drafter="lookup")
    live.observe_round(RoundRecord(k=4, drafted=4, accepted=3, emitted=4, seconds=0.2, at_seconds=0.5))
    answer = Answer(text="The quick", pieces=[["The quick", "draft"]], live=live, live_at=0.5)
    answer.stop()
    assert answer.stopped and answer.text == "The quick"
    assert answer.stats["done_reason"] == "stopped" and answer.stats["tokens_per_second"] == pytest.approx(8.0)
    assert answer.note == "Stopped after 4 tokens: the partial answer is kept."

    nothing = Answer()
    nothing.stop()
    assert nothing.stopped and nothing.stats is None and nothing.note == "Stopped early: no text had been generated."


# -- accepted draft text highlighted inside rendered Markdown -------------------------------------------

MARKDOWN_PIECES = [
    ["Use ", "standard"], ["**slicing**", "draft"], [":\n\n```python\ndef reverse(s", "correction"],
    ["):\n    return s[::-1]", "draft"], ["\n```\n\n- fast\n", "bonus"], ["- short <b>", "draft"], ["\n", "standard"],
]


def visible(fragment: str) -> str:
    """What a reader sees of an HTML fragment: its text, tags dropped, entities read."""
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def drafted(fragment: str) -> list[str]:
    """The stretches of text on the draft highlight's green (the innermost spans)."""
    from utils.app.highlight import DRAFT_SPAN

    return [html.unescape(text) for text in re.findall(re.escape(DRAFT_SPAN) + r"([^<]*)</span>", fragment)]


def test_draft_text_is_highlighted_inside_rendered_markdown():
    from utils.app.highlight import DRAFT_SPAN, pieces_html

    shown = pieces_html(MARKDOWN_PIECES)
    assert f"<p>Use <strong>{DRAFT_SPAN}slicing</span></strong>:</p>" in shown
    # The code block is a real <pre><code>, syntax-coloured, with the accepted draft text highlighted
    # inside it (indentation stays plain), and a Copy button in its corner.
    code = shown[shown.index("<code"):shown.index("</code>")]
    assert code.startswith('<code class="language-python">')
    assert visible(code) == "def reverse(s):\n    return s[::-1]\n"
    assert "".join(drafted(code)) == "):return s[::-1]" and "\n    <span" in code
    assert '<span style="color: #008000; font-weight: bold">def</span>' in code  # a keyword, coloured
    assert '<span style="color: #0000FF">reverse</span>' in code  # a function's name
    before_code = shown[:shown.index("<pre")]
    assert before_code.count('class="spec-copy"') == 1 and before_code.endswith("Copy</button>")
    # A list stays a list when its item was drafted, and raw HTML in an answer is text, not markup.
    assert f"<li>{DRAFT_SPAN}short &lt;b&gt;</span></li>" in shown and "<b>" not in shown
    assert shown.count("<span") == shown.count("</span>")


def test_code_in_a_language_pygments_does_not_know_is_plain_and_marks_survive_every_position():
    from utils.app.highlight import pieces_html

    plain = pieces_html([["```klingon\nqapla' ", "standard"], ["batlh", "draft"], ["\n```\n", "standard"]])
    assert "<code class=\"language-klingon\">qapla' " in plain
    assert drafted(plain) == ["batlh"]
    # A draft that starts and ends inside tokens, and one at the very end of the block.
    pieces = [["```python\nprint(", "standard"], ["'hel", "draft"], ["lo')\nx = 4", "standard"], ["2", "draft"],
              ["\n```", "standard"]]
    code = pieces_html(pieces)
    assert visible(code[code.index("<code"):code.index("</code>")]) == "print('hello')\nx = 42\n"
    assert "".join(drafted(code)) == "'hel2" and drafted(code)[-1] == "2"


def test_highlighting_keeps_markdown_intact_while_streaming():
    from utils.app.highlight import DRAFT_SPAN, pieces_html

    # A code block still open while the answer streams is drawn as code, cursor included, no Copy yet.
    streaming = pieces_html([["```python\nx = ", "standard"], ["1", "draft"]], cursor=True)
    code = streaming[streaming.index("<code"):streaming.index("</code>")]
    assert code.startswith('<code class="language-python">') and visible(code) == "x = 1▌\n"
    assert drafted(code) == ["1"] and "spec-copy" not in streaming
    # A drafted heading or fence keeps its syntax at the start of the line.
    assert "<h2>" in pieces_html([["Intro\n\n", "standard"], ["## Steps", "draft"]])
    # A link's address is never changed by the highlight, even when the draft starts inside it.
    linked = pieces_html([["see [docs](https://exam", "standard"], ["ple.org) now", "draft"]])
    assert 'href="https://example.org"' in linked and f"{DRAFT_SPAN} now</span>" in linked
    # A drafted table row: each cell highlighted, no span left between the cells.
    table = pieces_html([["| a | b |\n|---|---|\n| ", "standard"], ["1 | 2", "draft"], [" |", "standard"]])
    assert f"{DRAFT_SPAN}1</span></td>" in table and "</td><span" not in table and table.count("<span") == 2


def test_chat_shows_a_highlighted_code_block_and_copy_buttons(data_dir):
    stored = ConversationStore(data_dir / "conversations.sqlite3")
    conversation = stored.create("code")
    stored.add_message(conversation, "user", "Reverse a string in Python.")
    text = "".join(piece for piece, _ in MARKDOWN_PIECES)
    stored.add_message(conversation, "assistant", text, pieces=MARKDOWN_PIECES)

    at = open_app()
    [shown] = answer_texts(at)
    assert '<pre style="' in shown and '<code class="language-python">' in shown
    assert "return" in drafted(shown)
    # Under the answer: a button holding the answer's Markdown as the model wrote it.
    copy_answer = f'data-copy-text="{html.escape(text, quote=True)}"'
    assert copy_answer in shown
    [question] = [m for m in at.chat_message if m.name == "user"]  # a question has no such button
    assert not question.get("html") and [m.value for m in question.markdown] == ["Reverse a string in Python."]
    at.sidebar.toggle(key="highlight").set_value(False).run()  # off: Streamlit's own Markdown of the same text
    [message] = [m for m in at.chat_message if m.name == "assistant"]
    assert [m.value for m in message.markdown] == [text.strip()]
    assert [copy_answer in h.value for h in message.get("html")] == [True]


def test_the_chart_says_so_far_only_while_the_answer_streams():
    from utils.app.speed import speedup_so_far

    baseline = {"tokens_per_second": 20.0}
    live = speculative_stats(100, 80, 60, [4] * 20)
    live["done_reason"] = ""
    assert speedup_so_far(live, baseline, 30.0) == "speed-up so far ×1.50 against the standard baseline"
    finished = {**live, "done_reason": "stop"}
    assert speedup_so_far(finished, baseline, 30.0) == "speed-up ×1.50 against the standard baseline"
    short = {**finished, "output_tokens": 3, "drafted_tokens": 3}
    assert "too short an answer" in speedup_so_far(short, baseline, 30.0)


def test_the_qwen_example_picks_the_pair_and_answers_with_it(data_dir):
    at = open_app()
    at.sidebar.number_input(key="max_tokens").set_value(12).run()
    [qwen] = [b for b in at.button if b.key == "example-Complete code with the Qwen pair"]
    assert not qwen.disabled  # the test server has both models
    qwen.click().run()
    assert not at.exception, at.exception
    assert at.sidebar.selectbox(key="target").value == "qwen2.5-coder:1.5b"
    assert at.sidebar.selectbox(key="drafter").value == "qwen2.5-coder:0.5b"
    stored = ConversationStore(data_dir / "conversations.sqlite3")
    [conversation] = stored.conversations()
    question, answer = stored.messages(conversation["id"])
    assert question["content"].startswith("Complete this Python function")
    assert answer["stats"]["target"] == "qwen2.5-coder:1.5b" and answer["stats"]["drafter"] == "qwen2.5-coder:0.5b"
