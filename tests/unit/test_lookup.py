"""Prompt lookup: continuations found in the context, cut into the target vocabulary's longest pieces."""

from __future__ import annotations

import pytest

from utils.engine.drafters.lookup import LOOKUP, PromptLookupDrafter
from utils.sampling import GREEDY

VOCABULARY = {"x", ")", ":", "):", " return", " x", "\n", "#", " again", "def", " foo", "("}
CODE = "def foo(x): return x\n# again\ndef foo("  # the end "def foo(" occurred at the start


def drafter(vocabulary: set[str] = VOCABULARY, min_match: int = 4, max_match: int = 8) -> PromptLookupDrafter:
    return PromptLookupDrafter(vocabulary, min_match=min_match, max_match=max_match)


async def test_continuation_is_split_into_the_longest_vocabulary_pieces() -> None:
    draft = await drafter().propose(CODE, 4, GREEDY)
    # "):" beats ")" and " return" beats any shorter piece.
    assert draft.pieces == ["x", "):", " return", " x"]
    assert draft.top_logprobs == []  # lookup reports no probabilities


async def test_k_limits_the_number_of_pieces() -> None:
    assert (await drafter().propose(CODE, 2, GREEDY)).pieces == ["x", "):"]
    assert (await drafter().propose(CODE, 1, GREEDY)).pieces == ["x"]
    assert (await drafter().propose(CODE, 0, GREEDY)).pieces == []
    assert (await drafter().propose(CODE, -1, GREEDY)).pieces == []


async def test_the_continuation_is_read_up_to_k_times_the_longest_piece() -> None:
    lookup = drafter()
    assert lookup.longest_piece == 7  # " return"
    assert lookup._continuation(CODE, 2 * lookup.longest_piece)[0] == "x): return x\n#"  # 14 characters
    # Long k: the whole rest of the context after the match, split until the end of the text.
    assert (await lookup.propose(CODE, 16, GREEDY)).pieces == [
        "x", "):", " return", " x", "\n", "#", " again", "\n", "def", " foo", "("
    ]


async def test_a_character_run_the_vocabulary_cannot_cut_ends_the_draft() -> None:
    draft = await drafter(VOCABULARY - {"\n"}).propose(CODE, 8, GREEDY)
    assert draft.pieces == ["x", "):", " return", " x"]


async def test_no_earlier_occurrence_no_draft() -> None:
    assert (await drafter().propose("abc 1234 abc", 4, GREEDY)).pieces == []  # 3 characters < min_match
    assert (await drafter().propose("short", 4, GREEDY)).pieces == []
    assert (await drafter().propose("", 4, GREEDY)).pieces == []


def test_the_shortest_suffix_is_min_match() -> None:
    assert drafter()._continuation("xyzw 1234 xyzw", 100)[0] == " 1234 xyzw"
    assert drafter(min_match=5)._continuation("xyzw 1234 xyzw", 100)[0] == ""


def test_the_latest_earlier_occurrence_is_used() -> None:
    assert drafter()._continuation("KEY=1 KEY=2 KEY=", 1)[0] == "2"


def test_a_longer_suffix_wins_over_a_later_shorter_one() -> None:
    # "abcdefgh" (8) occurred at the start, followed by "-1"; only "efgh" (4) occurred later, before "-2".
    context = "abcdefgh-1 ZZefgh-2 abcdefgh"
    assert drafter()._continuation(context, 2)[0] == "-1"
    assert drafter(max_match=4)._continuation(context, 2)[0] == "-2"


def test_a_suffix_longer_than_half_the_context_is_not_tried() -> None:
    # The 8-character suffix would need 16 characters of context; the 4-character one is used instead.
    assert drafter()._continuation("ab12cd 12cd", 3)[0] == " 12"


def test_registration_and_anchor_arguments() -> None:
    assert PromptLookupDrafter.kind == LOOKUP == "lookup"
    assert PromptLookupDrafter.exact_distribution is False
    assert PromptLookupDrafter.llama_server_args("auto", None) == ["--spec-type", "ngram-simple"]
    assert PromptLookupDrafter.llama_server_args("3", None) == [
        "--spec-type", "ngram-simple", "--spec-ngram-simple-size-m", "3"
    ]


@pytest.mark.parametrize("vocabulary", [set(), {"a"}])
def test_longest_piece_of_a_tiny_vocabulary(vocabulary: set[str]) -> None:
    assert PromptLookupDrafter(vocabulary).longest_piece == 1


async def test_each_piece_carries_the_matched_length_over_the_longest_sought() -> None:
    # "def foo(" (8 characters) occurred before: the longest match sought, so full confidence.
    assert (await drafter(max_match=8).propose(CODE, 4, GREEDY)).confidence == [1.0] * 4
    # Seeking up to 16 characters, only the last 4 ("foo(") are found again: 4 / 16.
    assert (await drafter(max_match=16).propose(CODE, 4, GREEDY)).confidence == [0.25] * 4


async def test_an_answer_whose_first_draft_is_long_copies() -> None:
    """Drafter.copies: the draft at the context's end is COPY_PIECES (8) long."""
    assert len((await drafter().propose(CODE, 8, GREEDY)).pieces) == 8
    assert await drafter().copies(CODE)
    short = "def foo(x):\ndef foo("  # what followed "def foo(" is 6 pieces: x ): \n def  foo (
    assert (await drafter().propose(short, 8, GREEDY)).pieces == ["x", "):", "\n", "def", " foo", "("]
    assert not await drafter().copies(short)
