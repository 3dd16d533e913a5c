"""Where draft tokens come from: one module per drafter, each registering itself (see base.py)."""

import importlib
import pkgutil

from utils.engine.draft import Branch, Draft
from utils.engine.drafters.base import (
    NONE,
    Drafter,
    DraftSetup,
    build_drafter,
    drafter_class,
    model_free_drafters,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["NONE", "Branch", "Draft", "DraftSetup", "Drafter", "build_drafter", "drafter_class", "model_free_drafters"]
