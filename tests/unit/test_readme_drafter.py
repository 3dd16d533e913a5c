"""docs/architecture.md's "Adding a drafter" example, run as written: defining the class is all it takes."""

from __future__ import annotations

import asyncio
import re
import types
from pathlib import Path

from utils.engine.drafters import drafter_class, model_free_drafters
from utils.engine.drafters.base import _REGISTRY
from utils.sampling import GREEDY

README = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def test_the_readme_drafter_registers_itself_and_drafts() -> None:
    source = re.search(r"```python\n# utils/engine/drafters/(\w+)\.py\n(.*?)```", README.read_text(), re.S)
    assert source, "docs/architecture.md shows a drafter in one file"
    module = types.ModuleType(f"utils.engine.drafters.{source.group(1)}")
    before = list(_REGISTRY)
    try:
        exec(compile(source.group(2), module.__name__, "exec"), module.__dict__)
        drafter = drafter_class("last-line")
        assert model_free_drafters()["last-line"] == drafter.description
        draft = asyncio.run(drafter({"a", "b", " ", "x", "\n"}).propose("ab x\nab", 4, GREEDY))
        assert draft.pieces == [" ", "x", "\n"]
    finally:
        _REGISTRY[:] = before
