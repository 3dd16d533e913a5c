"""Settings for the whole project, read from the environment and `.env` (pydantic-settings).

Every setting has a `SPEC_` environment variable (`SPEC_TARGET_MODEL=...`); `OLLAMA_HOST` keeps the
name every Ollama tool uses. Out-of-range values fail at start-up with pydantic's message.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

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
    # The embedded server's faster batch kernels (weight repacking) round a row differently inside a
    # batch than alone: greedy speculative answers may then differ from standard ones at near ties.
    fast_batches: bool = False

    # Models, named as in utils/embedded/models.json (Ollama library tags).
    target_model: str = "qwen2.5-coder:1.5b"
    draft_model: str = "qwen2.5-coder:0.5b"

    # Speculation.
    k_max: int = Field(default=8, ge=0, le=16, description="longest draft the controller may pick")
    p_min: float = Field(default=0.3, ge=0.0, le=1.0, description="stop drafting below this probability")
    n_min: int = Field(default=1, ge=1, le=16, description="drop drafts shorter than this")
    draft_top_k: int = Field(default=5, ge=1, le=20, description="draft candidates read per position")
    num_ctx: int = Field(default=4096, ge=256, le=131072)

    # Time limits (seconds) for every network call.
    connect_timeout: float = Field(default=5.0, gt=0)
    request_timeout: float = Field(default=300.0, gt=0, description="a whole standard answer")
    draft_timeout: float = Field(default=10.0, gt=0, description="one draft proposal")
    verify_timeout: float = Field(default=60.0, gt=0, description="one verification step")

    # Files. Models and conversations live outside the repository.
    data_dir: Path = DEFAULT_DATA_DIR

    @property
    def models_dir(self) -> Path:
        return self.data_dir / "models"

    @property
    def database_path(self) -> Path:
        return self.data_dir / "conversations.sqlite3"


@lru_cache
def get_settings() -> Settings:
    return Settings()
