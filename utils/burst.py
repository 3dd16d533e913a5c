"""The engine's headers: how a validator announces its burst, and how a request opts out of speculation.

`X-Speculative-Burst: <id> <size>` says that this request is one of `size` one-token requests sent
together under `id`. The embedded server then evaluates exactly those requests together, without
guessing from arrival times how many more are coming (a guess that either waits for requests that
never come or splits a burst that arrives slowly on a busy machine). Other servers ignore the header.

`X-Speculation: off` (below) asks a speculating server for standard generation, and
`X-Speculation-Events: on` for the engine's events of an answer made in it (utils/proxy/event_stream.py).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping

HEADER = "x-speculative-burst"
_ids = itertools.count()
_PROCESS = f"{os.getpid():x}"


def new_id() -> str:
    """An id no other burst of this process has."""
    return f"{_PROCESS}.{next(_ids)}"


def announce(size: int) -> dict[str, str]:
    """The header for the requests of one new burst of `size` requests."""
    return {HEADER: f"{new_id()} {size}"}


def parse(value: str | None) -> tuple[str, int] | None:
    """(id, size) from the header's value; None when absent or malformed (then the server guesses)."""
    if not value:
        return None
    burst_id, _, size = value.strip().partition(" ")
    return (burst_id, int(size)) if burst_id and size.isdigit() and 1 <= int(size) <= 64 else None


# A request with `X-Speculation: off` is answered by standard generation, never speculated, by the
# proxy and by `cli.py serve`. The engine sends it on every request of its own: each is one piece of
# an answer it is already making (a verification, a draft, a standard segment).
NO_SPECULATION = {"x-speculation": "off"}


# `X-Speculation-Events: on`: the answer's engine events, made with the settings of the headers below.
EVENTS = "x-speculation-events"
DRAFTER, DRAFT_K, P_MIN, DRAFT_TOP_K = (f"x-speculation-{name}" for name in ("drafter", "k", "p-min", "draft-top-k"))


def events_asked(headers: Mapping[str, str]) -> bool:
    return headers.get(EVENTS, "").strip().lower() == "on"


def opted_out(headers: Mapping[str, str] | list[tuple[bytes, bytes]]) -> bool:
    """Whether a request's headers (a mapping with lower-case names, such as Starlette's, or ASGI's raw
    pairs) turn speculation off."""
    if isinstance(headers, list):
        return any(name == b"x-speculation" and value.strip().lower() == b"off" for name, value in headers)
    return headers.get("x-speculation", "").strip().lower() == "off"
