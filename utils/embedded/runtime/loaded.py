"""The models the embedded server has loaded, by name: each one's runner (runner.py) and embedding
context (embedder.py), loaded on first use, reloaded for another num_ctx, unloaded per keep_alive
(residency.py). Names are resolved against the store (utils/embedded/store/); a name that is not
installed is Ollama's 404.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from utils.api.http import ApiError
from utils.embedded.runtime.embedder import Embedder
from utils.embedded.runtime.residency import Residency, keep_alive_seconds
from utils.embedded.runtime.runner import ModelRunner
from utils.embedded.store.models import ModelError, ModelStore
from utils.embedded.store.names import not_found

DEFAULT_NUM_CTX = 4096


class Loaded(Protocol):
    """What LoadedModels keeps of a runner or an embedding context: its context size, and closing it."""

    num_ctx: int

    def close(self) -> None: ...


L = TypeVar("L", bound=Loaded)


class LoadedModels:
    """Loaded runners by name; a request with another num_ctx reloads the model, as Ollama does.
    Embedding contexts (embedder.py) load beside them; `residency` unloads both per keep_alive."""

    def __init__(self, store: ModelStore, threads: int, batch: bool, fast_batches: bool, gpu_layers: int,
                 parallel: int):
        self.store, self.threads, self.batch, self.fast_batches = store, threads, batch, fast_batches
        self.gpu_layers, self.parallel = gpu_layers, parallel
        self.runners: dict[str, ModelRunner] = {}
        self.embedders: dict[str, Embedder] = {}
        self.lock = asyncio.Lock()
        self.residency = Residency(self.unload, self.busy)

    def resolve(self, name: str) -> str:
        """The canonical name of an installed model (store/names.py), or Ollama's 404 naming the installed tags."""
        try:
            spec = self.store.spec(name)
        except ModelError:
            raise ApiError(not_found(name, self.store.installed_names()), 404) from None
        if not self.store.path(spec.name).exists():
            if spec.registered:
                raise ApiError(f"model '{spec.name}' not found: its file {spec.file} is missing", 404)
            raise ApiError(
                f"model '{spec.name}' not found; install it with: python cli.py models install {spec.name}",
                404,
            )
        return spec.name

    def ready(self, name: str, num_ctx: int | None = None, keep_alive: Any = None) -> ModelRunner | None:
        """The common case of `get`, with no coroutine (the in-process target asks it every round):
        the runner loaded under this very name with that context, nothing to check; else None."""
        runner = self.runners.get(name)
        if runner is None or runner.num_ctx != (num_ctx or _num_ctx(runner.parameters)) or self.lock.locked():
            return None
        self.residency.touch(name, keep_alive)
        return runner

    async def get(self, name: str, num_ctx: int | None = None, keep_alive: Any = None) -> tuple[ModelRunner, float]:
        """The loaded runner, with its Modelfile parameters in `runner.parameters`."""
        runner = self.ready(name, num_ctx, keep_alive)
        if runner is not None:
            return runner, 0.0
        name = self.resolve(name)
        self.residency.touch(name, keep_alive)  # an invalid keep_alive is a 400 before anything loads
        parameters = self.store.spec(name).parameters
        wanted = num_ctx or _num_ctx(parameters)

        def make(path: Path) -> ModelRunner:
            loaded = ModelRunner(name, path, wanted, self.threads, self.batch, self.fast_batches, self.gpu_layers,
                                 self.parallel)
            loaded.parameters = parameters
            return loaded

        return await self._load(name, wanted, keep_alive, self.runners, "", make)

    async def embedder(self, name: str, num_ctx: int | None = None, keep_alive: Any = None) -> tuple[Embedder, float]:
        """The model's embedding context (embedder.py), loaded on first use like a runner."""
        name = self.resolve(name)
        wanted = num_ctx or _num_ctx(self.store.spec(name).parameters)
        self.residency.touch(name, keep_alive)
        return await self._load(name, wanted, keep_alive, self.embedders, " for embeddings",
                                lambda path: Embedder(name, path, wanted, self.threads))

    async def _load(self, name: str, wanted: int, keep_alive: Any, loaded: dict[str, L], purpose: str,
                    make: Callable[[Path], L]) -> tuple[L, float]:
        """`loaded[name]` with context `wanted`, (re)loaded by `make(path)` if needed; the load's time."""
        async with self.lock:
            current = loaded.get(name)
            if current and current.num_ctx == wanted:
                return current, 0.0
            started = time.perf_counter()
            if current:
                await asyncio.to_thread(current.close)
            await self._verify(name, loaded)
            try:
                current = await asyncio.to_thread(make, self.store.path(name))
            except Exception as error:  # noqa: BLE001 - a corrupt file must be a message, not a crash
                loaded.pop(name, None)
                raise ApiError(f"model '{name}' failed to load{purpose}: {error}", 500) from None
            loaded[name] = current
            self.residency.touch(name, keep_alive)  # its time counts from the end of loading
            return current, time.perf_counter() - started

    async def _verify(self, name: str, loaded: dict[str, L]) -> None:
        try:  # a truncated or damaged file is refused before llama.cpp reads it
            await asyncio.to_thread(self.store.verify, name)
        except ModelError as error:
            loaded.pop(name, None)
            raise ApiError(str(error), 500) from None

    def busy(self, name: str) -> bool:
        runner, embedder = self.runners.get(name), self.embedders.get(name)
        return bool((runner and runner.answering)
                    or (embedder and embedder.lock.locked()))

    async def unload(self, name: str, when_due: bool = True) -> None:
        """Free the model's runner and embedding context; from the reaper only once its keep_alive is over."""
        async with self.lock:
            if when_due and not self.residency.due(name):
                return  # used again while the reaper waited for the lock
            self.residency.forget(name)
            for loaded in (self.runners.pop(name, None), self.embedders.pop(name, None)):
                if loaded is not None:
                    await asyncio.to_thread(loaded.close)

    async def unload_now(self, name: str, keep_alive: Any) -> bool:
        """Ollama's unload request (no prompt, keep_alive 0): free the model now; False if not asked."""
        if keep_alive is None or keep_alive_seconds(keep_alive, self.residency.default) != 0:
            return False
        await self.unload(self.resolve(name), when_due=False)
        return True

    async def close(self) -> None:
        await self.residency.stop()
        everything: list[Loaded] = [*self.runners.values(), *self.embedders.values()]
        for loaded in everything:
            await asyncio.to_thread(loaded.close)
        self.runners.clear()
        self.embedders.clear()


def _num_ctx(parameters: dict[str, Any]) -> int:
    """As in Ollama: a request without num_ctx gets its model's Modelfile num_ctx, else the default."""
    return int(parameters.get("num_ctx") or DEFAULT_NUM_CTX)
