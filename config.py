"""Settings for the whole project, read from the environment and `.env` (pydantic-settings).

Every setting has a `SPEC_` environment variable (`SPEC_TARGET_MODEL=...`); `OLLAMA_HOST` keeps the
name every Ollama tool uses. Out-of-range values fail at start-up with pydantic's message.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from utils.engine.config import EngineConfig

DEFAULT_DATA_DIR = Path.home() / ".cache" / "ollama-speculative"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPEC_", env_file=".env", extra="ignore")

    # Servers. With no OLLAMA_HOST the project starts its embedded server on 127.0.0.1.
    ollama_host: str | None = Field(
        default=None, validation_alias=AliasChoices("OLLAMA_HOST", "SPEC_OLLAMA_HOST")
    )
    draft_host: str | None = None  # the draft model may live on another server
    embedded_host: str = "127.0.0.1"
    embedded_port: int = Field(default=11435, ge=1, le=65535)
    # The embedded server computes every row of a batch as it would be alone, with repacked (fast)
    # weights (utils/embedded/runtime/llama_params.py, Kernels). True: upstream's batch kernels,
    # which round a row differently inside a batch than alone: no faster here (the same kernels for
    # a lone token, slower prompts), and greedy speculative answers may part from standard ones.
    fast_batches: bool = False
    # Layers the embedded server puts on the GPU when llama.cpp was built with one (scripts/install.sh
    # builds with CUDA where nvcc is found): -1 all, 0 none. A CPU-only build ignores it.
    gpu_layers: int = Field(default=-1, ge=-1)
    # Answers each embedded model generates at once (Ollama's OLLAMA_NUM_PARALLEL): each has its own
    # KV-cache sequence of num_ctx tokens, and answers in progress advance a token each in turn.
    num_parallel: int = Field(default=4, ge=1, le=16,
                              validation_alias=AliasChoices("OLLAMA_NUM_PARALLEL", "SPEC_NUM_PARALLEL"))

    # Models, named as in utils/embedded/store/models.json (Ollama library tags).
    target_model: str = "qwen2.5-coder:1.5b"
    draft_model: str = "qwen2.5-coder:0.5b"

    # The speculative engine: draft limits, context size, time limits (SPEC_K_MAX, SPEC_P_MIN, ...).
    engine: EngineConfig = Field(default_factory=EngineConfig)

    # The proxy (`cli.py proxy`): the Ollama it fronts (default: OLLAMA_HOST, else the embedded server),
    # its drafter pairs ("target=drafter,target=drafter"; default below), its port, and the bearer key
    # that a listener on a non-loopback address requires.
    upstream: str | None = None
    pairs: str = ""
    proxy_port: int = Field(default=11435, ge=1, le=65535)
    api_key: str | None = None

    # Files. Models and conversations live outside the repository.
    data_dir: Path = DEFAULT_DATA_DIR
    # Other models folders (os.pathsep-separated) whose installed files an install or /api/pull copies
    # instead of downloading them: another data dir, a shared cache, a machine without network.
    model_sources: str = ""

    @model_validator(mode="before")
    @classmethod
    def _engine_fields(cls, values: object) -> object:
        """`Settings(k_max=4)` sets `engine.k_max`: the engine's fields may be given flat."""
        if not isinstance(values, dict):
            return values
        flat = {key: values.pop(key) for key in list(values) if key in EngineConfig.model_fields}
        if flat:
            engine = values.get("engine")
            base = engine.model_dump() if isinstance(engine, EngineConfig) else dict(engine or {})
            values["engine"] = EngineConfig(**{**base, **flat})
        return values

    def with_engine(self, **changes: object) -> Settings:
        """These settings with the engine's `changes` applied and validated (EngineConfig.replace)."""
        return self.model_copy(update={"engine": self.engine.replace(**changes)})

    @property
    def models_dir(self) -> Path:
        return self.data_dir / "models"

    @property
    def source_dirs(self) -> list[Path]:
        return [Path(folder).expanduser() for folder in self.model_sources.split(os.pathsep) if folder.strip()]

    @property
    def database_path(self) -> Path:
        return self.data_dir / "conversations.sqlite3"


@lru_cache
def get_settings() -> Settings:
    return Settings()
