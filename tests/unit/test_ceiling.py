"""The clairvoyant lookup bound (utils/bench/ceiling.py): the cheapest schedule through a known answer."""

from __future__ import annotations

import pytest

from utils.bench.ceiling import accepted_lengths, cheapest, eager
from utils.engine.drafters.lookup import PromptLookupDrafter

BURSTS = {1: 1.5, 2: 2.0, 3: 2.5, 4: 3.0}  # in standard tokens


def test_no_draft_anywhere_costs_one_standard_token_per_token() -> None:
    assert cheapest([[], [], []], 1.0, BURSTS) == (3.0, 0)


def test_a_fully_accepted_draft_is_taken_when_it_is_cheaper() -> None:
    # At position 0 a draft of 4 is all accepted: 5 tokens for 3.0, then 1 standard token.
    accepted = [[1, 2, 3, 4]] + [[]] * 5
    assert cheapest(accepted, 1.0, BURSTS) == (4.0, 1)


def test_a_draft_that_is_rejected_is_never_taken() -> None:
    accepted = [[0, 0, 0, 0], [0], [], []]
    assert cheapest(accepted, 1.0, BURSTS) == (4.0, 0)


def test_the_best_k_is_chosen_not_the_longest() -> None:
    # Only the first 2 pieces are right: a draft of 2 (3 tokens for 2.0) beats 4 (3 tokens for 3.0).
    accepted = [[1, 2, 2, 2], [], [], [], []]
    assert cheapest(accepted, 1.0, BURSTS) == (4.0, 1)


def test_a_draft_past_the_answer_end_counts_only_the_tokens_left() -> None:
    # Two tokens left; a draft of 1 accepted yields both for 1.5 instead of 2.0.
    assert cheapest([[1], []], 1.0, BURSTS) == (1.5, 1)


@pytest.mark.asyncio
async def test_accepted_lengths_compare_each_proposal_with_what_follows() -> None:
    vocabulary = {"a", "b", "c", "ab", " "}
    drafter = PromptLookupDrafter(vocabulary, min_match=2, max_match=2)
    prompt = "ab c ab "  # after "ab " earlier came "c"
    table = await accepted_lengths(drafter, prompt, ["c", " ", "x"], 2)
    # At 0 the context ends "b ": lookup proposes "c", " " (both right); at 1 it ends " c" and
    # proposes " ", "ab" (first right); at 2 it ends "c " and proposes "ab", " " (wrong: "x" follows).
    assert table == [[1, 2], [1, 1], [0, 0]]


def test_the_eager_rule_drafts_wherever_the_drafter_found_something() -> None:
    # At 0 a draft of 2 with 1 accepted (2 tokens for 2.0), at 2 nothing (1.0), at 3 all of 1 (1.5).
    assert eager([[1, 1], [2], [], [1], []], 1.0, BURSTS) == 4.5
