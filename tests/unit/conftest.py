"""The fast layer gives the same results on every machine: the settings classes (config.Settings and
utils.engine.config.EngineConfig, pydantic-settings) read no `.env` file and none of the developer's
SPEC_* or OLLAMA_* environment variables. A test that wants a setting passes it or sets it itself.
tests/unit/test_settings_isolation.py shows that this holds."""

from __future__ import annotations

import os

import pytest

from config import Settings
from utils.engine.config import EngineConfig

SETTINGS_CLASSES = (Settings, EngineConfig)
ENV_PREFIXES = ("SPEC_", "OLLAMA_")  # every setting's variable: SPEC_*, OLLAMA_HOST, OLLAMA_NUM_PARALLEL


@pytest.fixture(autouse=True)
def settings_from_defaults_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(ENV_PREFIXES):
            monkeypatch.delenv(name)
    for cls in SETTINGS_CLASSES:  # read at every instantiation (pydantic-settings)
        monkeypatch.setitem(cls.model_config, "env_file", None)
