"""The models the embedded server has loaded, by name: each one's runner (runner.py) and embedding
context (embedder.py), loaded on first use, reloaded for another num_ctx, unloaded per keep_alive
(residency.py). Names are resolved against the store (utils/embedded/store/); a name that is not
installed is Ollama's 404.

A model in use is never reloaded or unloaded under its answers, as in Ollama's scheduler (a runner's
reference count, server/sched.go): a request that needs it loaded otherwise (another num_ctx), an
unload (`keep_alive: 0`, `/api/delete`) and the requests for that model that arrive after them wait
until the answers in flight end; other models load meanwhile. In use: a job queued or running on its
worker, or a `hold` (a speculated answer, whose rounds are many jobs with gaps between them).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

from utils.api.http import ApiError
from utils.embedded.runtime.embedder import Embedder
from utils.embedded.runtime.residency import Residency, keep_alive_seconds
from utils.embedded.runtime.runner import ModelRunner
from utils.embedded.store.models import ModelError, ModelStore
from utils.embedded.store.names import not_found

DEFAULT_NUM_CTX = 4096
UNUSED_POLL_SECONDS = 0.01  # how often a waiting reload or unload looks whether the answers have ended


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
        # Per model, held by a load, reload or unload of it and while that waits for its answers: the
        # requests for that model that come meanwhile queue behind it, in order; other models' go on.
        self.turns: dict[str, asyncio.Lock] = {}
        self.changing: set[str] = set()  # the models whose turn is taken
        self.lock = asyncio.Lock()  # one load or close at a time (llama_defaults patches llama.cpp's defaults)
        self.holds: Counter[str] = Counter()  # answers keeping a model as it is loaded (`hold`)
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
        the runner loaded under this very name with that context, nothing to check; else None. While a
        reload or unload of this model waits, only the requests of answers holding it pass: the others
        queue behind it, in order (`get`)."""
        runner = self.runners.get(name)
        if runner is None or runner.num_ctx != (num_ctx or _num_ctx(runner.parameters)):
            return None
        if name in self.changing and not self.holds[name]:
            return None
        self.residency.touch(name, keep_alive)
        return runner

    async def get(self, name: str, num_ctx: int | None = None, keep_alive: Any = None) -> tuple[ModelRunner, float]:
        """The loaded runner, with its Modelfile parameters in `runner.parameters`."""
        runner = self.ready(name, num_ctx, keep_alive)
        if runner is not None:
            return runner, 0.0
        name = self.resolve(name)
        if (runner := self.ready(name, num_ctx, keep_alive)) is not None:  # asked by another of its names
            return runner, 0.0
        self.residency.touch(name, keep_alive)  # an invalid keep_alive is a 400 before anything loads
        spec = self.store.spec(name)
        parameters = spec.parameters
        wanted = num_ctx or _num_ctx(parameters)

        def make(path: Path) -> ModelRunner:
            loaded = ModelRunner(name, path, wanted, self.threads, self.batch, self.fast_batches, self.gpu_layers,
                                 self.parallel)
            loaded.parameters = parameters
            loaded.template, loaded.system = spec.template, spec.system
            return loaded

        return await self._load(name, wanted, keep_alive, self.runners, "", make)

    @asynccontextmanager
    async def hold(self, name: str, num_ctx: int | None = None, keep_alive: Any = None) -> AsyncIterator[float]:
        """The model loaded, kept as it is until the block ends, and the seconds its load took: the
        reference a speculated answer holds over its rounds, so that another client's num_ctx or
        unload waits for the whole answer."""
        runner, load = await self.get(name, num_ctx, keep_alive)
        self.holds[runner.name] += 1  # no await since `get` returned: nothing can reload it in between
        try:
            yield load
        finally:
            self.holds[runner.name] -= 1
            if not self.holds[runner.name]:
                del self.holds[runner.name]

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
        async with self._turn(name):
            current = loaded.get(name)
            if current and current.num_ctx == wanted:
                return current, 0.0
            started = time.perf_counter()
            if current:
                await self._until_unused(name)
            async with self.lock:
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
        """In use: held, a job queued or running on its runner, or an embedding being computed."""
        runner, embedder = self.runners.get(name), self.embedders.get(name)
        return bool(self.holds[name] or (runner and runner.answering)
                    or (embedder and embedder.lock.locked()))

    @asynccontextmanager
    async def _turn(self, name: str) -> AsyncIterator[None]:
        """The model's turn to be loaded or unloaded: one change of it at a time, in the order asked.
        Waiting here never blocks another model's loads, which an answer holding this one may need
        (a draft model's first load)."""
        async with self.turns.setdefault(name, asyncio.Lock()):
            self.changing.add(name)
            try:
                yield
            finally:
                self.changing.discard(name)

    async def _until_unused(self, name: str) -> None:
        """Wait, in the model's turn, until the answers in flight on `name` have ended (those that hold
        it still get its runner meanwhile: `ready`)."""
        while self.busy(name):
            await asyncio.sleep(UNUSED_POLL_SECONDS)

    async def unload(self, name: str, when_due: bool = True) -> None:
        """Free the model's runner and embedding context; from the reaper only once its keep_alive is over."""
        async with self._turn(name):
            if when_due and (not self.residency.due(name) or self.busy(name)):
                return  # used again while the reaper waited for its turn
            await self._until_unused(name)
            self.residency.forget(name)
            async with self.lock:
                for loaded in (self.runners.pop(name, None), self.embedders.pop(name, None)):
                    if loaded is not None:
                        await asyncio.to_thread(loaded.close)

    async def unload_now(self, name: str, keep_alive: Any) -> bool:
        """Ollama's unload request (no prompt, keep_alive 0): free the model now, or, while it answers,
        as soon as its answers end (the reaper: its keep_alive is now 0), answering at once as Ollama
        does (expireRunner); False if not asked."""
        if keep_alive is None or keep_alive_seconds(keep_alive, self.residency.default) != 0:
            return False
        name = self.resolve(name)
        if self.busy(name) and name in self.residency.last:
            self.residency.touch(name, 0)
        else:
            await self.unload(name, when_due=False)
        return True

    async def close(self) -> None:
        await self.residency.stop()
        everything: list[Loaded] = [*self.runners.values(), *self.embedders.values()]
        for loaded in everything:
            await asyncio.to_thread(loaded.close)
        self.runners.clear()
        self.embedders.clear()


def default_num_ctx() -> int:
    """The server-wide context: OLLAMA_CONTEXT_LENGTH when set to a number above 0, else 4096 (Ollama's
    api.DefaultOptions; its automatic size by VRAM gives 4096 below 24 GiB, as on a CPU)."""
    value = os.environ.get("OLLAMA_CONTEXT_LENGTH", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else DEFAULT_NUM_CTX


def _num_ctx(parameters: dict[str, Any]) -> int:
    """As in Ollama (server/routes.go modelOptions): a request's num_ctx, else its model's Modelfile
    num_ctx, else the server-wide default (OLLAMA_CONTEXT_LENGTH)."""
    return int(parameters.get("num_ctx") or default_num_ctx())
