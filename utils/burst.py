"""How a validator announces its burst to the server: one HTTP header on each of its K+1 requests.

`X-Speculative-Burst: <id> <size>` says that this request is one of `size` one-token requests sent
together under `id`. The embedded server then evaluates exactly those requests together, without
guessing from arrival times how many more are coming (a guess that either waits for requests that
never come or splits a burst that arrives slowly on a busy machine). Other servers ignore the header.
"""

from __future__ import annotations

import itertools
import os

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
