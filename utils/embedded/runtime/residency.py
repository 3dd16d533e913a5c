"""How long a loaded model stays loaded: Ollama's `keep_alive`.

Every request that uses a model sets how long it stays after its last use: a number of seconds or a
Go duration string ("5m", "1h30m", "0"), negative for ever, default 5 minutes (OLLAMA_KEEP_ALIVE).
A model in use is never unloaded; its time counts from when it was last seen busy. `expires_at` in
/api/ps is that moment.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from utils.api.http import ApiError

FOREVER = math.inf
REAP_SECONDS = 0.25  # how often expired models are looked for
GRACE_SECONDS = 1.0  # a model handed to a request this recently is not unloaded (its job may not be queued yet)
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^([+-]?)((?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))+$")
_TERM = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(value: str) -> float:
    """A Go duration ("5m", "1h30m", "-1s", "0") in seconds; ValueError if it is not one."""
    text = value.strip()
    if text in ("0", "+0", "-0"):
        return 0.0
    match = _DURATION.match(text)
    if not match:
        raise ValueError(value)
    seconds = sum(float(number) * _UNITS[unit] for number, unit in _TERM.findall(text))
    return -seconds if match.group(1) == "-" else seconds


def keep_alive_seconds(value: Any, default: float) -> float:
    """Seconds to stay loaded after the request, as Ollama reads `keep_alive` (api.Duration)."""
    if value is None:
        return default
    if isinstance(value, bool):
        raise ApiError(f"invalid keep_alive: {value!r}", 400)
    try:
        seconds = float(value) if isinstance(value, int | float) else parse_duration(str(value))
    except ValueError:
        raise ApiError(f'time: invalid duration "{value}" (keep_alive takes seconds or a duration '
                       'such as "5m", "1h", "-1")', 400) from None
    if math.isnan(seconds):
        raise ApiError("invalid keep_alive: NaN", 400)
    return FOREVER if seconds < 0 else seconds


def default_keep_alive() -> float:
    try:
        return keep_alive_seconds(os.environ.get("OLLAMA_KEEP_ALIVE") or "5m", 300.0)
    except ApiError:
        return 300.0


class Residency:
    """Per model name: when it was last used or busy, and for how long it may then stay."""

    def __init__(self, unload: Callable[[str], Awaitable[None]], busy: Callable[[str], bool]):
        self.unload, self.busy = unload, busy
        self.default = default_keep_alive()
        self.last: dict[str, float] = {}  # time.monotonic()
        self.last_wall: dict[str, float] = {}  # the same moment, time.time() (cheap per round), for expires_at
        self.keep: dict[str, float] = {}
        self.task: asyncio.Task | None = None

    def touch(self, name: str, keep_alive: Any = None) -> None:
        """A request uses `name`: it stays `keep_alive` (validated here) after this moment."""
        self.keep[name] = keep_alive_seconds(keep_alive, self.default)
        self.last[name] = time.monotonic()
        self.last_wall[name] = time.time()

    def due(self, name: str) -> bool:
        """Unused for longer than its keep_alive (and than the grace after it was handed to a request)."""
        if name not in self.last:
            return False
        return time.monotonic() - self.last[name] >= max(self.keep.get(name, self.default), GRACE_SECONDS)

    def forget(self, name: str) -> None:
        self.last.pop(name, None)
        self.last_wall.pop(name, None)
        self.keep.pop(name, None)

    def expires_at(self, name: str) -> str:
        """When it unloads if unused (the same answer until it is used again, as in Ollama)."""
        keep = self.keep.get(name, self.default)
        used = datetime.fromtimestamp(self.last_wall.get(name) or time.time(), UTC)
        moment = used + timedelta(seconds=keep if keep != FOREVER else 292 * 365 * 86400)
        return moment.isoformat().replace("+00:00", "Z")

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._reap())

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(REAP_SECONDS)
            for name in list(self.last):
                if self.busy(name):
                    self.last[name] = time.monotonic()  # the time to stay counts from the end of its work
                elif self.due(name):
                    await self.unload(name)
