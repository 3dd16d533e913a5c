"""The app's sidebar on the real embedded server (AppTest): the server, the drafters, and what it says
when the server is serial or down."""

from __future__ import annotations

import asyncio

import config
from tests.support.app import (
    open_app,
)
from tests.support.models import SMALL
from utils.app.store import ConversationStore
from utils.bench.advisor import check_parallel
from utils.engine.client import OllamaClient


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
        server = OllamaClient(serial_server_url)
        try:
            return await check_parallel(settings, server, SMALL, width=3, rounds=1)
        finally:
            await server.aclose()

    result = asyncio.run(check())
    assert result.width == 3 and result.sequential_seconds > 0 and result.concurrent_seconds > 0
    assert result.parallel == (result.concurrent_seconds < 0.6 * result.sequential_seconds)


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


def test_one_client_per_server_reads_the_version_once(server_url, monkeypatch):
    from utils.app import runtime

    settings = config.Settings()
    asked: list[str] = []
    original = OllamaClient._request

    async def counting(self, method, path, body=None):
        asked.append(path)
        return await original(self, method, path, body)

    monkeypatch.setattr(OllamaClient, "_request", counting)
    monkeypatch.setattr(runtime, "server_url", lambda settings: server_url)
    assert runtime.server(settings, server_url) is runtime.server(settings, server_url)
    first, second = runtime.server_info(settings), runtime.server_info(settings)
    assert first.version == second.version and SMALL in first.models
    assert asked.count("/api/version") <= 1 and asked.count("/api/tags") == 2


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

    # A generation error is explained by its typed cause, as the engine raises it.
    failed = GenerationError.of(ContextFull("input exceeds the context"), "partial")
    assert "no longer fits in the model's context" in explain(failed, settings)
    assert explain(GenerationError("the answer ended without its statistics", ""), settings).startswith("the answer")
