"""Drafters asked for a tree (issue 43): the branches each drafter proposes beside its main chain, exact
small cases, and that a chain (width 1) is what it was."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import pytest

from utils.engine.drafters.base import Draft
from utils.engine.drafters.lookup import PromptLookupDrafter
from utils.engine.drafters.model import BRANCH_BELOW, ModelDrafter
from utils.engine.drafters.suffix import SuffixDrafter
from utils.engine.memory import EngineMemory
from utils.engine.target import Chunk, Token
from utils.sampling import GREEDY

# One piece per capital letter with its space, as in test_suffix_drafter.py.
WORDS = {"A", "P", "Z", *(f" {c}" for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ")}


def rows(draft: Draft) -> list[tuple[int, list[str], list[float]]]:
    """The branches as (at, pieces, confidences rounded)."""
    return [(b.at, b.draft.pieces, [round(c, 4) for c in b.draft.confidence]) for b in draft.branches]


async def same_chain(drafter: Any, context: str, k: int, width: int) -> Draft:
    """The draft asked with `width`, once its main chain is checked against the chain (width 1)."""
    chain = await drafter.propose(context, k, GREEDY)
    tree = await drafter.propose(context, k, GREEDY, width)
    assert chain.branches == [] and tree.chain() == chain
    assert all(branch.draft.branches == [] and branch.at < len(tree) for branch in tree.branches)
    return tree


# -- suffix decoding ----------------------------------------------------------------------------------

def suffix(vocabulary: set[str] = WORDS, **bounds: Any) -> SuffixDrafter:
    return SuffixDrafter(vocabulary, "t", memory=EngineMemory(), **bounds)


async def test_suffix_a_line_seen_with_two_continuations_branches_to_the_rarer() -> None:
    drafter = suffix()
    for _ in range(2):
        drafter.finish("", "A B C D E F")
    drafter.finish("", "A B C G H I")
    # " B C" (2 pieces) matched: " D" 2 of 3 and " E" sure, weighed 2 / (2 + 4); " G" 1 of 3 then " H".
    tree = await same_chain(drafter, "Z A B C", 8, 3)
    assert tree.pieces == [" D", " E"] and [round(c, 4) for c in tree.confidence] == [0.2222, 0.3333]
    assert rows(tree) == [(0, [" G", " H"], [0.1111, 0.3333])]
    assert tree.branches[0].draft.source == tree.source == "shared"


async def test_suffix_the_answers_own_tree_follows_the_latest_and_branches_to_the_older() -> None:
    tree = await same_chain(suffix(), "P A B C D E A B C G H P A B C", 8, 2)
    assert tree.pieces == [" G", " H", " P"]  # a tie: the latest seen
    assert rows(tree) == [(0, [" D", " E", " A"], [0.1429, 0.4286, 0.4286])]
    assert tree.source == tree.branches[0].draft.source == "answer"


async def test_suffix_no_branch_under_the_probability_cut() -> None:
    drafter = suffix()
    for _ in range(19):
        drafter.finish("", "A B C D E")
    drafter.finish("", "A B C G H")  # 1 in 20 after " B C": 0.05 < 0.1
    assert (await same_chain(drafter, "Z A B C", 8, 4)).branches == []


# The tree's pieces are "ab" "cd" / "ab" "ce"; after the open tail "a" the target's pieces are "bcd" or
# "bc" "e": a branch that parts at the second tree piece parts at the first draft piece.
CUT = {"ab", "a", "b", "bc", "bcd", "c", "cd", "ce", "d", "e", "Z", ".", "X", "Y"}
SEEN = "X.Zabcd.Zabce.Zabcd"


async def test_suffix_a_branch_is_cut_into_pieces_as_the_draft_is() -> None:
    tree = await same_chain(suffix(CUT), SEEN + "Y.Za", 8, 3)
    # ".Z" matched (2 pieces, weighed 2/6): 3 of 4 go on with "ab", the piece "bcd" starts in; then
    # "cd" 2 of 3, "ce" 1 of 3: the branch's first piece has the ratio where the tree parts, 1/3.
    assert tree.pieces == ["bcd"] and tree.confidence == [0.25]
    assert rows(tree) == [(0, ["bc", "e"], [0.1111, 0.1111])]


async def test_suffix_branches_the_likeliest_first_within_the_drafts_length() -> None:
    drafter = suffix(CUT)
    tree = await same_chain(drafter, SEEN + "Y.Zab", 8, 3)
    assert tree.pieces == ["cd", "Y", "."]  # after ".Zabcd" "Y" and "." once each: the latest
    assert rows(tree) == [(0, ["ce", ".", "Z"], [0.1071, 0.4286, 0.4286]), (1, [".", "Z"], [0.2143, 0.4286])]
    # Two alternatives as likely (1/4): the earlier one first.
    assert rows(await drafter.propose(SEEN + "Y.Zab", 8, GREEDY, 2)) == rows(tree)[:1]
    # One piece asked for: the branch at the second is past the draft, the other one piece long.
    assert rows(await same_chain(drafter, SEEN + "Y.Zab", 1, 3)) == [(0, ["ce"], [0.1071])]


# -- prompt lookup ------------------------------------------------------------------------------------

CODE = {"a", ",", " b", " c", " d", ")", "\n", "def", " f", "("}


def lookup() -> PromptLookupDrafter:
    return PromptLookupDrafter(CODE | {"1", "2", "3", ";", "KEY", "="}, min_match=4, max_match=8)


async def test_lookup_older_occurrences_that_went_on_otherwise_are_branches() -> None:
    tree = await same_chain(lookup(), "KEY=1;KEY=2;KEY=3;KEY=", 3, 4)
    assert tree.pieces == ["3", ";", "KEY"]  # the latest occurrence of "KEY="
    assert rows(tree) == [(0, ["2", ";", "KEY"], [0.5] * 3), (0, ["1", ";", "KEY"], [0.5] * 3)]
    assert len((await lookup().propose("KEY=1;KEY=2;KEY=3;KEY=", 3, GREEDY, 2)).branches) == 1


async def test_lookup_a_branch_begins_where_its_pieces_part_from_the_draft() -> None:
    context = "def f(a, b)\ndef f(a, d)\ndef f(a, c)\ndef f(a, d)\ndef f("
    tree = await same_chain(lookup(), context, 4, 4)
    # ")\ndef f(" (8 characters) went on with "a, d)" last time, "a, c)" before, then "a, d)" again:
    # the same text as the draft's, no branch.
    assert tree.pieces == ["a", ",", " d", ")"]
    assert rows(tree) == [(2, [" c", ")"], [1.0, 1.0])]


async def test_lookup_a_single_earlier_occurrence_gives_a_chain() -> None:
    assert (await same_chain(lookup(), "def f(a, b)\ndef f(", 4, 4)).branches == []


# -- a draft model ------------------------------------------------------------------------------------

def token(text: str, p: float, **others: float) -> Token:
    return Token(text, math.log(p), {text: math.log(p), **{t: math.log(q) for t, q in others.items()}})


class Server:
    """Streams the same tokens whatever it is asked, one chunk each."""

    def __init__(self, tokens: list[Token]):
        self.tokens = tokens

    async def stream_raw(self, model: str, prompt: str, options: dict[str, Any], top_logprobs: int = 0,
                         **_: Any) -> AsyncIterator[Chunk]:
        for each in self.tokens:
            yield Chunk(each.text, [each], None, 1)
        yield Chunk("", [], "stop", 1)


def model(tokens: list[Token]) -> ModelDrafter:
    return ModelDrafter(Server(tokens), "draft", p_min=0.2, n_min=1, top_k=5, num_ctx=None)  # type: ignore[arg-type]


# "def" is sure; " f" half sure, " g" next; "(" 0.6, "[" next after a broken character and an empty piece.
TOKENS = [token("def", 0.9, klass=0.05), token(" f", 0.5, **{" g": 0.3, "\ufffd": 0.15}),
          token("(", 0.6, **{"": 0.25, "[": 0.1})]


async def test_model_the_second_choice_where_the_draft_was_unsure() -> None:
    assert BRANCH_BELOW == 0.8
    tree = await same_chain(model(TOKENS), "", 3, 4)
    assert tree.pieces == ["def", " f", "("]
    assert rows(tree) == [(1, [" g"], [0.3]), (2, ["["], [0.1])]  # the least sure position first
    assert tree.branches[0].draft.top_logprobs == [tree.top_logprobs[1]]  # the same distribution
    assert rows(await model(TOKENS).propose("", 3, GREEDY, 2)) == [(1, [" g"], [0.3])]


async def test_model_the_piece_under_p_min_is_still_dropped() -> None:
    # " f" at 0.1 < p_min 0.2 ends the draft: no branch stands in for it.
    tree = await same_chain(model([TOKENS[0], token(" f", 0.1, **{" g": 0.09})]), "", 3, 4)
    assert tree.pieces == ["def"] and tree.branches == []


@pytest.mark.parametrize("width", [1, 2])
async def test_model_a_sure_draft_has_no_branches(width: int) -> None:
    sure = [token("def", 0.9, klass=0.05), token(" f", 0.95, **{" g": 0.01})]
    assert (await model(sure).propose("", 3, GREEDY, width)).branches == []
