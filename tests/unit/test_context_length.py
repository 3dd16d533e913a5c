"""The context a model is loaded with, as Ollama chooses it (server/routes.go modelOptions): the
request's num_ctx, else the model's Modelfile num_ctx, else OLLAMA_CONTEXT_LENGTH, else 4096."""

from __future__ import annotations

import pytest

from utils.embedded.runtime.loaded import DEFAULT_NUM_CTX, _num_ctx


def test_without_a_setting_a_model_gets_ollama_s_default() -> None:
    assert _num_ctx({}) == DEFAULT_NUM_CTX == 4096


def test_ollama_context_length_sets_the_server_wide_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_CONTEXT_LENGTH", "32768")
    assert _num_ctx({}) == 32768


def test_a_model_s_num_ctx_parameter_wins_over_the_server_wide_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_CONTEXT_LENGTH", "32768")
    assert _num_ctx({"num_ctx": 8192}) == 8192


@pytest.mark.parametrize("value", ["0", "", "lots"])
def test_an_unset_or_unreadable_value_leaves_the_default(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OLLAMA_CONTEXT_LENGTH", value)  # Ollama: 0 is "automatic", 4096 on a CPU
    assert _num_ctx({}) == 4096
