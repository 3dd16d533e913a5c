"""Models registered by name beside the catalogue: a user's own GGUF files, an Ollama installation's
blobs, copies. One JSON file in the models folder, name -> where the file is and what it should be.

A registered file is used where it is (nothing is copied); the store checks its size and sha256 before
loading it, as for catalogue models.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

REGISTRY_FILE = "registered.json"


class Registry:
    """name -> {"path", "size", "sha256", "source", "parameters"} (the Modelfile parameters of that
    name, parameters.py) and, for a copy of a model that has them, its "template" and "system"; every
    change is written at once, atomically."""

    def __init__(self, models_dir: Path):
        self.path = models_dir / REGISTRY_FILE
        self._lock = threading.Lock()

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            return dict(json.loads(self.path.read_text()).get("models", {}))
        except FileNotFoundError:
            return {}

    def _write(self, entries: dict[str, dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}")
        temporary.write_text(json.dumps({"models": entries}, indent=1, sort_keys=True))
        os.replace(temporary, self.path)

    def get(self, name: str) -> dict[str, Any] | None:
        return self._read().get(name)

    def names(self) -> list[str]:
        return sorted(self._read())

    def entries(self) -> dict[str, dict[str, Any]]:
        return self._read()

    def put(self, name: str, path: Path, size: int, sha256: str, source: str,
            parameters: dict[str, Any] | None = None, template: str | None = None, system: str = "") -> None:
        with self._lock:
            entries = self._read()
            entries[name] = {"path": str(path), "size": size, "sha256": sha256, "source": source,
                             "parameters": parameters or {}}
            if template is not None:
                entries[name].update(template=template, system=system)
            self._write(entries)

    def remove(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            entries = self._read()
            removed = entries.pop(name, None)
            if removed is not None:
                self._write(entries)
            return removed
