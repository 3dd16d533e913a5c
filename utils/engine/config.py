"""The engine's settings: draft limits, draft sampling, context size and time limits.

Read from the environment like the app's settings (`SPEC_K_MAX`, `SPEC_P_MIN`, ...) and nested in
`config.Settings` as `settings.engine`; the engine itself takes only this object.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

K_LIMIT = 16  # the longest draft anything may ask for: the controller, a fixed --k, the app's slider


class EngineConfig(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPEC_", env_file=".env", extra="ignore")

    # Past 8 (controller.CHAIN_K) only a free drafter's sure copy is verified, where it pays (controller.py).
    k_max: int = Field(default=8, ge=0, le=K_LIMIT, description="longest draft the controller may pick")
    p_min: float = Field(default=0.3, ge=0.0, le=1.0, description="stop drafting below this probability")
    n_min: int = Field(default=1, ge=1, le=K_LIMIT, description="drop drafts shorter than this")
    draft_top_k: int = Field(default=5, ge=1, le=20, description="draft candidates read per position")
    # 1: drafts are chains. Above: a free drafter or draft model is asked for up to width - 1 branches,
    # each verified where it is measured to pay (tree_policy.py); off by default, as measured on this CPU.
    tree_width: int = Field(default=1, ge=1, le=4, description="drafted continuations a round may verify")
    # None: the server's own (the model's Modelfile, else Ollama's default). Set, every request of the CLI
    # and the app asks for it; Ollama reloads a model whose num_ctx changes, so only set it on purpose.
    num_ctx: int | None = Field(default=None, ge=256, le=1 << 20, description="context size asked of the server")

    def replace(self, **changes: object) -> EngineConfig:
        """A copy with `changes` (None: unchanged), validated like the settings themselves: the one way
        the CLI, the app and the proxy derive an engine's settings from the environment's."""
        wanted = {key: value for key, value in changes.items() if value is not None}
        unknown = sorted(set(wanted) - set(type(self).model_fields))
        if unknown:
            raise ValueError(f"unknown engine settings: {', '.join(unknown)}")
        return type(self).model_validate({**self.model_dump(), **wanted})

    def context_options(self) -> dict[str, int]:
        """`num_ctx` for a request's options where one is set, else nothing (the server's own)."""
        return {"num_ctx": self.num_ctx} if self.num_ctx else {}

    connect_timeout: float = Field(default=5.0, gt=0, description="seconds to connect to a server")
    request_timeout: float = Field(default=300.0, gt=0, description="seconds for a whole standard answer")
    draft_timeout: float = Field(default=10.0, gt=0, description="seconds for one draft proposal")
    verify_timeout: float = Field(default=60.0, gt=0, description="seconds for one verification step")
