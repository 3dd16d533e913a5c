"""One real embedded server (llama.cpp, bundled models) for the whole test session, and the process's
caches emptied around every test, so that tests pass alone, in any order and after one another.

Set OLLAMA_HOST_FOR_TESTS to run the suite against another Ollama-compatible server instead.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import ollama
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from utils.embedded.server import EmbeddedServer  # noqa: E402

UNIT = Path(__file__).resolve().parent / "unit"  # the fast layer: no model, no server


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects anything
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test outside tests/unit/ needs the real engine and models: mark it `models`, so that
    `pytest -m "not models"` runs the fast layer alone."""
    for item in items:
        if UNIT not in item.path.resolve().parents:
            item.add_marker(pytest.mark.models)


def clear_process_caches() -> None:
    """Empties what the project keeps for the life of the process, in the modules already imported
    (one not imported yet holds nothing): the settings read once, an embedded server `utils.hosts`
    started for a CLI call, and Streamlit's data caches (st.cache_data: tokenizer relations, the
    parallel check), and the app's engine memory. What the engine learns lives in an EngineMemory its
    owner passes in, so a test that builds a decoder or a proxy starts from a memory of its own.

    Left alone: the session's embedded server (`server_url`) and what it loaded, and the rest of
    Streamlit's st.cache_resource (the app's one event loop and its clients: resources, not results,
    which clearing would leak rather than close)."""
    if app_runtime := sys.modules.get("utils.app.runtime"):
        app_runtime.engine_memory.clear()
    if config := sys.modules.get("config"):
        config.get_settings.cache_clear()
    if hosts := sys.modules.get("utils.hosts"):
        hosts.stop_embedded()
    if streamlit := sys.modules.get("streamlit"):
        # Outside a running app Streamlit warns, on every clear, that it keeps the cache in memory.
        quiet = logging.getLogger("streamlit.runtime.caching.cache_data_api")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            streamlit.cache_data.clear()
        finally:
            quiet.setLevel(level)


@pytest.fixture(autouse=True)
def fresh_process_caches() -> Iterator[None]:
    """Every test starts from empty caches and leaves none behind (see clear_process_caches)."""
    clear_process_caches()
    yield
    clear_process_caches()


@pytest.fixture(scope="session")
def server_url(tmp_path_factory) -> str:
    if url := os.environ.get("OLLAMA_HOST_FOR_TESTS"):
        yield url
        return
    log = tmp_path_factory.mktemp("server") / "server.log"
    server = EmbeddedServer(log_path=log)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def served(tmp_path_factory) -> Iterator[str]:
    """`cli.py serve` with speculation on, as a user starts it, shared by the tests of speculation in
    the server. K = 4 fixed: every draft is verified (on this CPU the controller finds that the draft
    model does not pay, and would not draft)."""
    from tests.support.models import DRAFT, TARGET

    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with EmbeddedServer(log_path=log, speculation=True,
                        args=["--pair", f"{DRAFT}=lookup", "--pair", f"{TARGET}={DRAFT}", "--k", "4"]) as server:
        yield server.url


@pytest.fixture(scope="session")
def standard(server_url: str):
    """The session server's greedy standard answers, each computed once (tests/support/engine.py)."""
    from tests.support.engine import StandardAnswers

    return StandardAnswers(server_url)


@pytest.fixture
def client(server_url: str) -> ollama.AsyncClient:
    return ollama.AsyncClient(host=server_url)
