"""What the embedded server's routes share: one `EmbeddedState` on `app.state.embedded`.

The routes are module-level functions (api.py, management.py, embeddings.py, burst_api.py), as the
proxy's are (utils/proxy/app.py); each finds the state through its request, so that a module holds
no server of its own and one process could run two apps.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from starlette.requests import Request

from utils.embedded.runtime.loaded import LoadedModels
from utils.embedded.store.models import ModelStore


@dataclass
class EmbeddedState:
    models: LoadedModels  # the models loaded (and, through them, the store they come from)
    pulls: dict[str, asyncio.Lock] = field(default_factory=dict)  # per model: a second pull waits for the first

    @property
    def store(self) -> ModelStore:
        return self.models.store


def state_of(request: Request) -> EmbeddedState:
    return request.app.state.embedded
