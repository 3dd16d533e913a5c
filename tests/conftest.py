"""One real embedded server (llama.cpp, bundled models) for the whole test session.

Set OLLAMA_HOST_FOR_TESTS to run the suite against another Ollama-compatible server instead.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import ollama
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from utils.embedded.server import EmbeddedServer  # noqa: E402

UNIT = Path(__file__).resolve().parent / "unit"  # the fast layer: no model, no server

SMALL = "smollm2:135m"
TARGET = "qwen2.5-coder:1.5b"
DRAFT = "qwen2.5-coder:0.5b"


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects anything
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test outside tests/unit/ needs the real engine and models: mark it `models`, so that
    `pytest -m "not models"` runs the fast layer alone."""
    for item in items:
        if UNIT not in item.path.resolve().parents:
            item.add_marker(pytest.mark.models)


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


@pytest.fixture
def client(server_url: str) -> ollama.AsyncClient:
    return ollama.AsyncClient(host=server_url)
