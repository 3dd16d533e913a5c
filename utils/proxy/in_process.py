"""Speculation composed for `cli.py serve`: the proxy's front on the embedded server's in-process target.

The embedded server knows nothing of speculation (utils/embedded/http/api.py takes any `Front`); the
proxy knows nothing of llama.cpp. This module, above both, joins them: the engine answers for every
model in `pairs` on the server's in-process target, with the proxy's routing and statistics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from config import Settings
from utils.embedded.http.target import InProcessTarget
from utils.embedded.store.models import ModelStore
from utils.proxy.front import SpeculatingFront
from utils.proxy.pairs import model_free_pairs
from utils.proxy.serving import ProxyConfig

if TYPE_CHECKING:
    from utils.embedded.http.api import Front


def default_pairs(store: ModelStore) -> dict[str, str]:
    """Suffix decoding for every installed model; a draft model only where the user pairs it (on this
    CPU a draft model does not pay)."""
    return model_free_pairs([spec.name for spec in store.installed()])


def speculating(settings: Settings, pairs: dict[str, str], k: int | None = None) -> Front:
    """The speculating front for `create_app`: `pairs` speculated, with a fixed draft length `k` if given."""
    config = ProxyConfig(upstream="http://in-process", pairs=pairs, engine=settings.engine, k=k)

    def front(app, models, about):  # noqa: ANN001, ANN202 - create_app's Front
        return SpeculatingFront(app, InProcessTarget(app, models, about), config, about)

    return front
