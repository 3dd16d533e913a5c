"""The one way settings are derived from the environment's: EngineConfig.replace, validated."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from config import Settings
from utils.engine.config import EngineConfig


def test_replace_changes_what_is_given_and_validates_it() -> None:
    base = EngineConfig(k_max=6, p_min=0.3)
    derived = base.replace(p_min=0.5, draft_top_k=None)  # None: unchanged
    assert (derived.k_max, derived.p_min, derived.draft_top_k) == (6, 0.5, base.draft_top_k)
    assert base.p_min == 0.3  # a copy
    with pytest.raises(ValidationError):
        base.replace(p_min=1.5)
    with pytest.raises(ValidationError):
        base.replace(k_max=99)
    with pytest.raises(ValueError, match="unknown engine settings: kmax"):
        base.replace(kmax=3)


def test_settings_with_engine_keeps_everything_else() -> None:
    settings = Settings(target_model="a:1b", k_max=4)
    derived = settings.with_engine(p_min=0.7)
    assert derived.engine.p_min == 0.7 and derived.engine.k_max == 4 and derived.target_model == "a:1b"
    with pytest.raises(ValidationError):
        settings.with_engine(num_ctx=3)  # below the smallest context a server accepts
