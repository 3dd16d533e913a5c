"""Stop strings arrive piece by piece: text that could be the start of one must wait."""

from __future__ import annotations


def held_back(text: str, stops: list[str]) -> int:
    """Length of the longest end of `text` that is a beginning (not the whole) of a stop string."""
    longest = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:size]):
                longest = size
                break
    return longest
