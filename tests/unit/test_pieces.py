"""How a draft is cut into the target's pieces (utils/engine/pieces.py), on a small hand-made BPE.

tests/test_pieces.py holds the same cut against llama.cpp's own tokenizer on the real models."""

from __future__ import annotations

from utils.engine.drafters.lookup import PromptLookupDrafter
from utils.engine.drafters.suffix import SuffixDrafter
from utils.engine.memory import EngineMemory
from utils.engine.pieces import Pieces, byte_decoder
from utils.sampling import GREEDY

ENCODE = {byte: char for char, byte in byte_decoder().items()}


def level(text: str) -> str:
    """`text` in the byte-level alphabet merges are written in (a space is "Ġ")."""
    return "".join(ENCODE[byte] for byte in text.encode())


def merge(left: str, right: str) -> str:
    return f"{level(left)} {level(right)}"


# A Qwen-like tokenizer: four spaces are a token, and so is " return", but an indented line is
# "   " + " return" (the pre-tokenizer gives the last space to the word).
MERGES = [merge(" ", " "), merge("  ", " "), merge("  ", "  "), merge("r", "e"), merge("re", "t"),
          merge("u", "r"), merge("ur", "n"), merge("ret", "urn"), merge(" ", "return"), merge("x", "\n")]
VOCABULARY = {" ", "  ", "   ", "    ", "r", "e", "t", "u", "n", "x", "\n", "re", "ret", "ur", "urn", "return",
              " return", "x\n", ":", "(", ")", "f"}
QWEN = Pieces(VOCABULARY, MERGES, "qwen2")


def test_an_indented_line_is_cut_as_the_pre_tokenizer_splits_it() -> None:
    assert QWEN.cut("    return x") == ["   ", " return", " ", "x"]


def test_without_a_known_pre_tokenizer_the_longest_piece_is_taken() -> None:
    assert Pieces(VOCABULARY, MERGES, "unknown").cut("    return") == ["    ", "return"]
    assert Pieces(VOCABULARY).cut("    return") == ["    ", "return"]


def test_the_last_word_is_not_final_as_spaces_join_the_word_after_them() -> None:
    text = "f(x):\n    "
    assert QWEN.final(text, 0) == len("f(x):\n")  # "    " may yet become "   " + " return"
    assert QWEN.final("f(x):\n    return", 0) == len("f(x):\n   ")  # " return" may grow


def test_a_draft_after_an_indentation_continues_its_last_word() -> None:
    # The target wrote "   " (three spaces) and will write " return" next: the draft begins there.
    assert QWEN.after("f(x):\n   ", " return x", 2) == [" return", " "]
    # A context whose own pieces end inside a word of the draft: the text is cut on its own.
    assert QWEN.after("f(x):\n  ", "  return", 2) == [" ", " return"]


def test_a_piece_that_is_no_token_ends_the_draft() -> None:
    assert QWEN.after("", "ret\u00e9", 5) == ["ret"]  # é is no piece of this vocabulary


async def test_lookup_and_suffix_drafts_are_cut_as_the_target_cuts_them() -> None:
    context = "f(x):\n    return x\n" * 2 + "f(x):\n"  # the longest piece would draft "    " + "return"
    lookup = PromptLookupDrafter(QWEN, min_match=4, max_match=4)
    assert (await lookup.propose(context, 3, GREEDY)).pieces == ["   ", " return", " "]
    suffix = SuffixDrafter(QWEN, "t", memory=EngineMemory())
    assert (await suffix.propose(context, 3, GREEDY)).pieces == ["   ", " return", " "]
    greedy = PromptLookupDrafter(VOCABULARY, min_match=4, max_match=4)
    assert (await greedy.propose(context, 3, GREEDY)).pieces == ["    ", "return", " "]
