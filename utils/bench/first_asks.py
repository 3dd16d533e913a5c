"""First asks and repeats: which answers a drafter made before having seen an answer to the same prompt.

Suffix decoding (utils/engine/drafters/suffix.py) keeps every finished answer and drafts from them, and
llama-server's `ngram-mod` hashes every request's n-grams: asked the same prompt again, such a drafter
copies its earlier answer, and the speed-up of that repeat (×2 and more) says nothing about a new
question. Drafters that learn nothing from a finished answer (prompt lookup, a draft model) meet every
prompt as if for the first time. So wherever a speed-up is shown, a repeat is measured and shown apart
from a first ask, and the headline is the first ask's.
"""

from __future__ import annotations

from typing import Any

from utils.engine.drafters import NONE, Drafter, drafter_class

FIRST, AGAIN = "first ask", "asked again"


def remembers_answers(drafter: str) -> bool:
    """Whether `drafter` learns from finished answers (its `finish` does something): then a prompt it
    has answered before is drafted from that answer."""
    if not drafter or drafter == NONE:
        return False
    try:
        return drafter_class(drafter).finish is not Drafter.finish
    except LookupError:
        return False


def asks(runs: list[dict[str, Any]]) -> list[str]:
    """FIRST or AGAIN for each benchmark run, in the order they ran (results.json's): a run is asked
    again where its drafter remembers answers and the same engine and drafter answered the same prompt
    before in this benchmark (an earlier repeat, or another K of the drafter: they may share a memory)."""
    seen: set[tuple[str, str, str]] = set()
    kinds = []
    for run in runs:
        key = (run.get("engine", "project"), run["drafter"], run["prompt_id"])
        kinds.append(AGAIN if remembers_answers(run["drafter"]) and key in seen else FIRST)
        seen.add(key)
    return kinds


def asks_in_words(runs: list[dict[str, Any]]) -> str:
    """The report's sentence on first asks and repeats."""
    kinds = asks(runs)
    if AGAIN not in kinds:
        return ("First asks: every answer here is a first ask (no drafter had seen an answer to its prompt before: "
                "no drafter that remembers answers was asked the same prompt twice).")
    return (f"First asks and repeats: {kinds.count(AGAIN)} of {len(kinds)} answers were asked again: their drafter "
            "(suffix decoding, llama-server's ngram-mod) remembers earlier answers and had already answered the "
            "same prompt in this benchmark (an earlier repeat, or another K), so it copies that answer. Their rows "
            "are apart, marked 'asked again'; every other row is of first asks, the figure for a new question.")
