"""The app's sidebar on the real embedded server (AppTest): the server, the drafters, and what it says
when the server is serial or down."""

from __future__ import annotations

import asyncio
import logging
import time

import httpx

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
    # The version the server reports, said to be the embedded server's own (not "API 0.12.11").
    version = httpx.get(f"{config.get_settings().ollama_host}/api/version", timeout=30).json()["version"]
    assert f"this project's embedded llama.cpp server (version {version})" in sidebar_text
    assert "API " not in sidebar_text
    assert "batches the nested verification requests" in sidebar_text
    assert at.sidebar.selectbox(key="target").value == SMALL
    # Only drafters that can draft for the target, and faster: not the target itself (it was listed as
    # "unusable"), nor a model at least as large (the Qwen models, for the smallest target).
    labels = at.sidebar.selectbox(key="drafter").options
    assert labels == ["lookup", "suffix"], labels
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert f"not offered, not smaller than {SMALL}: qwen2.5-coder:0.5b, qwen2.5-coder:1.5b" in captions
    # By default what `cli.py serve` pairs the target with: suffix decoding (issue 44: the configured draft
    # model was the default, and did not pay). What the chosen drafter is, in words, under the box.
    assert at.sidebar.selectbox(key="drafter").value == "suffix"
    at.sidebar.selectbox(key="target").set_value("qwen2.5-coder:1.5b").run()
    assert at.sidebar.selectbox(key="drafter").options == ["lookup", "suffix", "qwen2.5-coder:0.5b", SMALL]
    at.sidebar.selectbox(key="drafter").set_value(SMALL).run()
    assert f"{SMALL}: cross-tokenizer" in " ".join(c.value for c in at.sidebar.caption)
    at.sidebar.selectbox(key="drafter").set_value("lookup").run()
    assert "lookup: prompt lookup, no model" in " ".join(c.value for c in at.sidebar.caption)
    # The drafter made the target: no longer offered, and the default drafter instead.
    at.sidebar.selectbox(key="drafter").set_value("qwen2.5-coder:0.5b").run()
    at.sidebar.selectbox(key="target").set_value("qwen2.5-coder:0.5b").run()
    assert not at.exception, at.exception
    assert "qwen2.5-coder:0.5b" not in at.sidebar.selectbox(key="drafter").options
    assert at.sidebar.selectbox(key="drafter").value == "suffix"


def test_sidebar_on_a_serial_server_says_how_to_fix_it(data_dir, serial_server_url, monkeypatch):
    monkeypatch.setenv("OLLAMA_HOST", serial_server_url)
    config.get_settings.cache_clear()
    at = open_app()
    [warning] = at.sidebar.warning
    assert "Parallel verification: no" in warning.value and "restart it without --no-batch" in warning.value


def test_parallel_check_measures_both_ways(serial_server_url):
    """The check Ollama servers get (the embedded one says whether it batches): per round, a
    verification's requests one after another, then another's all at once, each set timed whole.
    What a set's requests overlap is read from the real client's calls, not from timings; the verdict
    on a server that evaluates one request at a time is "not parallel" (its concurrent set does the
    same work one request after another, so only a sequential set slowed by two thirds in two rounds
    of three could turn it)."""
    settings = config.Settings()
    calls: list[tuple[str, float, float]] = []  # prompt, started, ended

    class Watched(OllamaClient):
        async def next_token(self, model, prompt, options, top_logprobs=0, burst=None):
            started = time.perf_counter()
            try:
                return await super().next_token(model, prompt, options, top_logprobs, burst)
            finally:
                calls.append((prompt, started, time.perf_counter()))

    width, rounds = 3, 3

    async def check():
        server = Watched(serial_server_url)
        try:
            return await check_parallel(settings, server, SMALL, width=width, rounds=rounds)
        finally:
            await server.aclose()

    result = asyncio.run(check())
    assert result.width == width and len(calls) == 1 + 2 * width * rounds  # a first call loads the model
    calls.sort(key=lambda call: call[1])
    for round_number in range(rounds):
        first = 1 + 2 * width * round_number
        one_by_one, at_once = calls[first:first + width], calls[first + width:first + 2 * width]
        for requests in (one_by_one, at_once):  # one verification: each prompt extends the one before
            assert all(later[0].startswith(earlier[0]) and later[0] != earlier[0]
                       for earlier, later in zip(requests, requests[1:]))
        assert one_by_one[0][0] != at_once[0][0]  # each set its own prompts: nothing cached for the other
        # One after another: each asked after the one before was answered.
        assert all(later[1] >= earlier[2] for earlier, later in zip(one_by_one, one_by_one[1:]))
        # All at once: every one asked before any was answered.
        assert max(started for _, started, _ in at_once) < min(ended for _, _, ended in at_once)
    sequential = [sum(e - s for _, s, e in calls[1 + 2 * width * r:1 + 2 * width * r + width]) for r in range(rounds)]
    concurrent = [max(e for _, _, e in calls[1 + 2 * width * r + width:1 + 2 * width * (r + 1)])
                  - min(s for _, s, _ in calls[1 + 2 * width * r + width:1 + 2 * width * (r + 1)])
                  for r in range(rounds)]
    # The times it reports are each set's whole time (the median round's), no less than its requests took.
    assert result.sequential_seconds >= min(sequential) and result.concurrent_seconds >= min(concurrent)
    assert not result.parallel, result


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


def test_an_example_click_logs_no_stack_trace(data_dir, monkeypatch):
    """An example prompt sets the sidebar's widgets for its answer (use_for_one_answer); Streamlit logged
    a warning with a stack trace on each click, as those widgets were drawn with starting values too."""
    from streamlit.elements.lib import policies

    logged: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = logged.append  # type: ignore[method-assign]
    monkeypatch.setattr(policies, "_shown_default_value_warning", False)  # logged once a process
    policies._LOGGER.addHandler(handler)
    try:
        at = open_app()
        at.number_input(key="max_tokens").set_value(8)
        at.button(key="example-Edit pasted code").click().run()
        assert not at.exception, at.exception
        at.run()  # the settings come back after the answer
        assert not at.exception, at.exception
    finally:
        policies._LOGGER.removeHandler(handler)
    assert at.sidebar.selectbox(key="drafter").value == "suffix"
    assert [record.getMessage() for record in logged] == []
