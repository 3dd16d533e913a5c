"""The app's tests' fixtures: every test opens the app with OLLAMA_HOST pointing at the test session's
server, a fresh data folder, and the smallest model as target (tests/support/app.py opens and drives it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import streamlit.testing.v1.app_test as app_test

import config
from tests.support.app import NavigationPagesManager
from tests.support.models import SMALL
from utils.embedded.server import EmbeddedServer


@pytest.fixture(autouse=True)
def navigation_app(monkeypatch):
    monkeypatch.setattr(app_test, "PagesManager", NavigationPagesManager)


@pytest.fixture
def data_dir(server_url, tmp_path, monkeypatch) -> Iterator[Path]:
    """The app's environment: the test server, a fresh data folder, the small target."""
    monkeypatch.setenv("OLLAMA_HOST", server_url)
    monkeypatch.setenv("SPEC_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPEC_TARGET_MODEL", SMALL)
    config.get_settings.cache_clear()
    yield tmp_path / "data"
    config.get_settings.cache_clear()


@pytest.fixture(scope="module")
def serial_server_url(tmp_path_factory) -> Iterator[str]:
    """An embedded server that evaluates one request at a time, like Ollama with OLLAMA_NUM_PARALLEL=1."""
    server = EmbeddedServer(log_path=tmp_path_factory.mktemp("serial") / "server.log", batch=False)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
