"""bench-overhead's in-process path: the embedded server loaded in the benchmark's own process, its
requests made through the in-process target that `cli.py serve` speculates on
(utils/embedded/http/target.py), so that "outside the engine" is what that path pays: no HTTP, no
JSON, runner jobs woken back once. The engine times are the runner's own (prompt evaluation and
generation), as the HTTP path reads them from Ollama's `*_duration` fields.
"""

from __future__ import annotations

import os
import time

from utils.bench.overhead import Bench, Sample


class LocalBench(Bench):
    way = "in process"

    def __init__(self, target: str, draft: str, models, local):  # noqa: ANN001 - LoadedModels, InProcessTarget
        self.url, self.target, self.draft, self.num_ctx = local.url, target, draft, 4096
        self.models, self.local = models, local
        self.server = local

    @classmethod
    async def start(cls, target: str, draft: str) -> LocalBench:
        from config import get_settings
        from utils.embedded.server import load_app
        from utils.embedded.store.models import ModelStore

        create_app = load_app()  # llama.cpp's libraries first (server.load_app)
        from utils.embedded.http.api import about
        from utils.embedded.http.target import InProcessTarget

        settings = get_settings()
        app = create_app(ModelStore(settings.models_dir, settings.source_dirs), threads=os.cpu_count() or 2,
                         fast_batches=settings.fast_batches, gpu_layers=settings.gpu_layers,
                         parallel=settings.num_parallel)
        models = app.state.models
        return cls(target, draft, models, InProcessTarget(app, models, about(models)))

    async def aclose(self) -> None:
        await self.models.close()

    def _options(self, num_predict: int) -> dict:
        return {"temperature": 0, "num_predict": num_predict, "num_ctx": self.num_ctx}

    async def one(self, model: str, prompt: str, burst: dict[str, str] | None = None) -> dict:
        step = (await self.local.next_tokens(model, [prompt], [self._options(1)]))[0]
        return {"total_duration": self.local.engine_ns, "prompt_eval_count": step.prompt_tokens,
                "response": step.token.text if step.token else ""}

    async def stream(self, model: str, prompt: str, num_predict: int, top: int) -> tuple[list[str], dict]:
        pieces, count = [], 0
        async for chunk in self.local.stream_raw(model, prompt, self._options(num_predict), top):
            if chunk.done_reason is None:
                pieces.append(chunk.text)
                count += len(chunk.tokens)
        return pieces, {"total_duration": self.local.engine_ns, "eval_count": count}

    async def burst(self, prompts: list[str], one_request: bool) -> Sample:
        started = time.perf_counter()
        await self.local.next_tokens(self.target, prompts, [self._options(1)] * len(prompts))
        wall = (time.perf_counter() - started) * 1000
        return Sample(wall, self.local.engine_ns / 1e6, self.local.evaluations)
