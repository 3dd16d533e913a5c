"""Speculation composed for `cli.py serve`: the proxy's front on the embedded server's in-process target.

The embedded server knows nothing of speculation (utils/embedded/http/api.py takes any `Front`); the
proxy knows nothing of llama.cpp. This module, above both, joins them: the engine answers for every
model in `pairs` on the server's in-process target, with the proxy's routing and statistics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from config import Settings
from utils.embedded.http.target import InProcessTarget
from utils.embedded.store.models import ModelError, ModelStore
from utils.proxy.front import SpeculatingFront
from utils.proxy.pairs import model_free_pairs
from utils.proxy.serving import ProxyConfig

if TYPE_CHECKING:
    from utils.embedded.http.api import Front


class InstalledPairs(dict[str, str]):
    """Suffix decoding for every model the store has, those made while the server runs (`/api/create`,
    `/api/copy`, `/api/pull`) included: a name not paired yet is looked up in the store (as the server
    resolves it: "name" is "name:latest"), so a new model is paired at its first request, as the
    models present at start-up are."""

    def __init__(self, store: ModelStore):
        super().__init__(model_free_pairs(store.installed_names()))
        self.store = store

    def __contains__(self, model: object) -> bool:
        if not super().__contains__(model) and isinstance(model, str):
            try:
                if self.store.is_installed(self.store.spec(model).name):
                    self.update(model_free_pairs([model]))
            except ModelError:
                return False
        return super().__contains__(model)

    def get(self, model: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return self[model] if model in self else default


def default_pairs(store: ModelStore) -> dict[str, str]:
    """Suffix decoding for every installed model, now and later; a draft model only where the user
    pairs it (on this CPU a draft model does not pay)."""
    return InstalledPairs(store)


def speculating(settings: Settings, pairs: dict[str, str], k: int | None = None) -> Front:
    """The speculating front for `create_app`: `pairs` speculated, with a fixed draft length `k` if given."""
    config = ProxyConfig(upstream="http://in-process", pairs=pairs, engine=settings.engine, k=k)

    def front(app, models, about):  # noqa: ANN001, ANN202 - create_app's Front
        return SpeculatingFront(app, InProcessTarget(app, models, about), config, about)

    return front
