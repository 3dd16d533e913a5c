"""Suffix decoding: suffix tries of the answer and of the target's earlier answers, exact small cases."""

from __future__ import annotations

import pytest

from utils.engine.drafters import drafter_class, model_free_drafters
from utils.engine.drafters.base import COPY_PIECES
from utils.engine.drafters.suffix import (
    MAX_DEPTH,
    MAX_SPEC_FACTOR,
    MIN_TOKEN_PROB,
    SUFFIX,
    SuffixDrafter,
    SuffixTree,
    speculate,
    suffix_store,
)
from utils.engine.memory import EngineMemory
from utils.sampling import GREEDY

# One piece per capital letter with its space: "A B C" is the pieces "A", " B", " C".
WORDS = {"A", "P", "Z", *(f" {c}" for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ")}


@pytest.fixture(autouse=True)
def memory(monkeypatch: pytest.MonkeyPatch) -> EngineMemory:
    """The memory the drafters of one test share (each test has its own)."""
    fresh = EngineMemory()
    monkeypatch.setitem(globals(), "MEMORY", fresh)
    return fresh


MEMORY = EngineMemory()


def drafter(target: str = "t", vocabulary: set[str] = WORDS, **bounds) -> SuffixDrafter:
    return SuffixDrafter(vocabulary, target, memory=MEMORY, **bounds)


async def draft(suffix: SuffixDrafter, context: str, k: int = 8) -> list[str]:
    return (await suffix.propose(context, k, GREEDY)).pieces


def paths(tree: SuffixTree, node: int = 0, prefix: tuple[int, ...] = ()) -> dict[tuple[int, ...], int]:
    """Every piece sequence stored in `tree` with its count."""
    kids = tree.kids.get(node) or ({tree.token[tree.best[node]]: tree.best[node]} if tree.best[node] >= 0 else {})
    found = {}
    for token, child in kids.items():
        found[(*prefix, token)] = tree.count[child]
        found |= paths(tree, child, (*prefix, token))
    return found


def test_defaults_are_vllms_and_the_drafter_is_registered() -> None:
    assert (MAX_DEPTH, MAX_SPEC_FACTOR, MIN_TOKEN_PROB) == (24, 1.0, 0.1)
    assert drafter_class(SUFFIX) is SuffixDrafter
    assert model_free_drafters()[SUFFIX] == SuffixDrafter.description
    assert SuffixDrafter.exact_distribution is False
    # Beside it in `bench --native`: llama.cpp's ngram-mod, which Ollama 0.30+ users can switch on.
    assert SuffixDrafter.llama_server_args("auto", None) == ["--spec-type", "ngram-mod"]
    assert SuffixDrafter.llama_server_args("4", None) == ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", "4"]


def test_the_trie_counts_every_substring_up_to_its_depth() -> None:
    tree = SuffixTree(depth=2)
    active = tree.extend([], [1, 2, 1, 2])
    assert paths(tree) == {(1,): 2, (1, 2): 2, (2,): 2, (2, 1): 1}
    assert [tree.token[node] for node in active] == [2]  # depth - 1 active nodes: the last piece's
    assert tree.nodes == 5


async def test_the_prompt_is_matched_and_its_continuation_drafted() -> None:
    # "A B C" occurred before, followed by " D E X": a 3-piece match drafts at most 3 pieces.
    assert await draft(drafter(), "P A B C D E X A B C") == [" D", " E", " X"]
    assert await draft(drafter(), "P A B C D E X A B C", k=2) == [" D", " E"]
    assert await draft(drafter(), "P A B C D E X A B C", k=0) == []
    assert await draft(drafter(), "P A B C D E X Q") == []  # " Q" never occurred before


async def test_the_answer_tree_grows_with_the_context() -> None:
    suffix = drafter()
    assert await draft(suffix, "P A B C D E X") == []
    tree = suffix.open[-1].tree
    assert await draft(suffix, "P A B C D E X A B") == [" C", " D"]  # the same tree, extended
    assert suffix.open[-1].tree is tree and len(suffix.open) == 1
    assert await draft(suffix, "P A B C D E X A B C") == await draft(drafter("fresh"), "P A B C D E X A B C")
    # Another answer in progress gets a tree of its own; the first one is still there.
    assert await draft(suffix, "Z P Q R S P Q") == [" R", " S"]
    assert len(suffix.open) == 2 and await draft(suffix, "P A B C D E X A B C D") == [" E", " X", " A", " B"]


async def test_an_earlier_answer_is_drafted_in_a_later_one() -> None:
    first = drafter()
    first.finish("Z A B", " K L M N O")
    # A new drafter for the same target (as the CLI builds one per decoder) knows the answer too.
    later = drafter()
    assert await draft(later, "Z Y K L M") == [" N", " O"]
    # The end of the prompt is kept before the answer: the same question gets the answer from its start.
    assert await draft(later, "Q A B", k=2) == [" K", " L"]


async def test_targets_never_share_answers() -> None:
    drafter("one").finish("", " K L M N O")
    assert await draft(drafter("two"), "Z Y K L M") == []
    assert await draft(drafter("one"), "Z Y K L M") == [" N", " O"]


async def test_a_short_match_drafts_a_short_draft() -> None:
    # Only " Z" matches (once before, followed by eight pieces): max_spec_factor 1.0 allows one piece.
    context = "A Z Q R S T U V W X B Z"
    assert await draft(drafter(), context) == [" Q"]
    assert await draft(drafter("f2", factor=2.0), context) == [" Q", " R"]
    # The tree's depth bounds match + draft: depth 3, a 2-piece match, one piece from the match ...
    assert await draft(drafter("d3", depth=3), "Z A B C D E F A B C", k=1) == [" D"]
    assert await draft(drafter("d24"), "Z A B C D E F A B C") == [" D", " E", " F"]
    # ... then, asked for more, the tree followed through that piece as if written, and so on.
    assert await draft(drafter("d3", depth=3), "Z A B C D E F A B C", k=3) == [" D", " E", " F"]


@pytest.mark.parametrize(("d", "e", "cut", "drafted"), [
    (1, 1, MIN_TOKEN_PROB, [" E"]),  # 50/50: 0.5 >= 0.1, the latest branch seen (edits: the newest version)
    (1, 1, 0.6, []),  # 50/50 under a 0.6 threshold: nothing
    (19, 1, 0.6, [" D"]),  # 95/5: 0.95
    (1, 19, 0.6, [" E"]),  # the most frequent branch, whichever came first
    (19, 1, MIN_TOKEN_PROB, [" D"]),  # the most frequent branch, though another came later
])
async def test_the_probability_cut(d: int, e: int, cut: float, drafted: list[str]) -> None:
    suffix = drafter(min_prob=cut)
    for _ in range(d):
        suffix.finish("", "A B C D")
    for _ in range(e):
        suffix.finish("", "A B C E")
    assert await draft(suffix, "Z A B C") == drafted


async def test_the_running_probability_stops_the_draft() -> None:
    # Four 50/50 branch points in a row after a 7-piece match: 0.5, 0.25, 0.125 pass 0.1, 0.0625 does not.
    suffix = drafter()
    for times, end in ((8, "X"), (4, "D Y"), (2, "D E Z"), (1, "D E F G"), (1, "D E F H")):
        for _ in range(times):  # the latest branch seen wins a tie
            suffix.finish("", f"P Q R S A B C {end}")
    assert await draft(suffix, "P Q R S A B C") == [" D", " E", " F"]
    tree = suffix.store.tree
    proposal = speculate(tree, tree.suffixes(suffix.tokens("P Q R S A B C")), 8)
    assert proposal.probs == [0.5, 0.25, 0.125] and proposal.score == 0.875 and proposal.match == 7


def test_removing_an_answer_restores_the_tree_exactly() -> None:
    tree, other = SuffixTree(depth=3), SuffixTree(depth=3)
    first, second = [1, 2, 3, 1, 2, 4], [2, 3, 1, 5, 2, 3]
    tree.extend([], first)
    tree.extend([], second)
    other.extend([], second)
    tree.remove(first)
    assert paths(tree) == paths(other) and tree.nodes == other.nodes
    tree.remove(second)
    assert paths(tree) == {} and tree.nodes == 1 and tree.kids == {}


async def test_the_oldest_answers_are_evicted_past_the_answer_bound() -> None:
    suffix = drafter(max_answers=2)
    suffix.finish("", " K L M N O")
    suffix.finish("", " Q R S T U")
    suffix.finish("", " D E F G H")  # the third: the first one goes
    assert len(suffix.store.answers) == 2
    assert await draft(drafter(), "Z Y K L M") == []
    assert await draft(drafter(), "Z Y Q R S") == [" T", " U"]
    assert await draft(drafter(), "Z Y D E F") == [" G", " H"]


def test_the_node_bound_holds_however_many_answers_come() -> None:
    suffix = drafter(max_nodes=300, max_answers=1000)
    store = suffix_store(MEMORY, "t")
    letters = "BCDEFGHIJKLMNOPQRSTUVWXYZ"
    for n in range(200):  # 200 different answers of 12 pieces, 66 nodes or more each at depth 24
        answer = "".join(f" {letters[(n * 7 + i * (n % 5 + 1)) % 25]}" for i in range(12))
        suffix.finish("", answer)
        assert store.tree.nodes <= 300
        assert len(store.tree.count) <= 300 + 12 * MAX_DEPTH  # freed nodes are used again
    assert 1 <= len(store.answers) < 200
    # One answer larger than the bound alone keeps only its end.
    suffix.finish("", " K" * 1000)
    assert store.tree.nodes <= 300 and len(store.answers[-1]) == 300 // MAX_DEPTH


async def test_the_draft_is_cut_into_the_targets_pieces() -> None:
    vocabulary = {"x", ")", ":", "):", " return", " ret", "urn", " x", "\n", "#", "def", " foo", "("}
    suffix = drafter("code", vocabulary)
    context = "def foo(x): return x\n#\ndef foo("
    assert await draft(suffix, context) == ["x", "):", " return"]  # longest pieces, as the target's
    assert suffix.tokens(" return") == [suffix.store.ids[" return"]]
    # A character that is no piece of the vocabulary is matched but never drafted.
    suffix = drafter("accent", vocabulary | {" "})
    assert await draft(suffix, "def foo(x é\n#\ndef foo(") == ["x", " "]  # a 3-piece match, stopped at "é"


def test_what_a_drafter_learned_stays_in_its_memory() -> None:
    suffix = drafter()
    suffix.finish("", " K L M")
    assert suffix_store(MEMORY, "t") is suffix.store and suffix.store.answers
    other = SuffixDrafter(WORDS, "t", memory=EngineMemory())
    assert other.store is not suffix.store and not other.store.answers
    assert not SuffixDrafter(WORDS, "t").store.answers  # no memory given: one of its own


async def test_each_piece_carries_its_count_ratio_weighed_by_its_match_length() -> None:
    suffix = drafter()
    for times, end in ((8, "X"), (4, "D Y"), (2, "D E Z"), (1, "D E F G"), (1, "D E F H")):
        for _ in range(times):
            suffix.finish("", f"P Q R S A B C {end}")
    # Running probabilities 0.5, 0.25, 0.125 are ratios of 0.5 each, after a 7-piece match: 7/11 of them.
    assert (await suffix.propose("P Q R S A B C", 8, GREEDY)).confidence == pytest.approx([0.5 * 7 / 11] * 3)
    # " Z" twice, once followed by " Q" (the other is the context's end): a ratio of 0.5 after a
    # 1-piece match, weighed 1/5.
    assert (await drafter("w").propose("A Z Q R S T U V W X B Z", 8, GREEDY)).confidence == [0.1]


async def test_a_copy_is_matched_though_the_context_ends_inside_one_of_its_pieces() -> None:
    # The history reads '{\n' '  "' 'tool'; the answer so far ends in '{\n ', which the target wrote as
    # '{\n' ' ' and which never occurred as pieces: the tree is followed to '{\n' and its continuation,
    # '  "tool', must begin with the open ' ', the draft being what comes after it.
    vocabulary = {"x", "{\n", "{", "\n", "\t", " ", "  ", '  "', ' "', '"', "tool", '":', " 1", "}"}
    suffix = drafter("tail", vocabulary)
    assert await draft(suffix, 'x{\n  "tool": 1}\nx{\n ') == [' "', "tool"]  # a 2-piece match: 2 pieces
    assert suffix.open[-1].text == 'x{\n  "tool": 1}\nx{\n'  # ' ' could still become '  "': not in the tree
    # An open tail the continuation contradicts drafts nothing.
    assert await draft(drafter("tail2", vocabulary), 'x{\n  "tool": 1}\nx{\n\t') == []


async def test_only_pieces_whose_boundary_is_final_enter_the_answer_tree() -> None:
    vocabulary = WORDS | {" CD"}  # " C" at the end may yet become " CD"
    suffix = drafter("final", vocabulary)
    assert await draft(suffix, "P A B C D E X A B C") == [" D", " E", " X"]
    assert suffix.open[-1].text == "P A B C D E X A B"
    assert await draft(suffix, "P A B C D E X A B C D") == [" E", " X", " A", " B"]  # " C" " D" now final
    assert suffix.open[-1].text == "P A B C D E X A B C D"


async def test_a_character_that_is_no_piece_keeps_the_tree_in_step_with_the_text() -> None:
    # "é" is no piece of WORDS: its id is below 0. The tree must still end where the text read ends,
    # whatever pieces were seen before (an id below 0 once read another piece's text, from the end).
    suffix = drafter()
    suffix.tokens(" K L M")
    assert await draft(suffix, "P A é B C D X A é B C") == [" D", " X", " A"]
    assert suffix.open[-1].text == "P A é B C D X A é B C"


async def test_a_draft_says_which_tree_it_came_from() -> None:
    """The controller calibrates the two trees' confidences apart (Draft.source)."""
    assert (await drafter().propose("P A B C D E X A B C", 8, GREEDY)).source == "answer"
    drafter().finish("Z A B", " K L M N O")
    assert (await drafter().propose("Z Y K L M", 8, GREEDY)).source == "shared"
    assert (await drafter().propose("Z Y K L M", 8, GREEDY)).head(1).source == "shared"


# A file of 30 two-letter lines, no pair of pieces twice: "A D", "B K", ... (26 letters, 7 steps apart).
FILE = "".join(f" {chr(65 + i % 26)} {chr(65 + (i * 7 + 3) % 26)}" for i in range(30))


async def test_a_sure_copy_is_drafted_past_the_trees_depth() -> None:
    """An agent rewriting a file it read: the answer so far copies the file's first 26 pieces. The tree
    (depth 24) drafts 12 pieces from a 12-piece match; asked for 16, the draft goes on, each piece
    with the confidence its own match gives it."""
    copied = FILE[: 2 * 13 * 2]  # 26 pieces of the file, written again
    context = "P" + FILE + " Z Z" + copied
    expected = [piece for pair in FILE[len(copied):].split(" ")[1:] for piece in [f" {pair}"]]
    suffix = drafter()
    assert await draft(suffix, context, k=12) == expected[:12]
    long = await suffix.propose(context, 16, GREEDY)
    assert long.pieces == expected[:16] and long.source == "answer"
    # A copy counts twice where it ends (the original and the end itself): the first piece's ratio is
    # 1/2, the rest 1, each weighed by the longest match that occurs where the drafted one does: the
    # 23 the tree holds (23 / 27), though 12 were followed.
    assert long.confidence == pytest.approx([0.5 * 23 / 27] + [23 / 27] * 15)
    assert len(await suffix.propose(context, 30, GREEDY)) == 30


async def test_a_copy_is_surer_the_longer_it_has_run() -> None:
    """The confidence of a copy's pieces weighs how long the copy has run, not the match drafted from."""
    for copied, weight in ((12, 12 / 16), (16, 16 / 20), (26, 23 / 27)):
        draft = await drafter(f"t{copied}").propose("P" + FILE + " Z Z" + FILE[: 2 * copied], 8, GREEDY)
        assert draft.confidence == pytest.approx([0.5 * weight] + [weight] * 7), copied


async def test_an_answer_whose_first_draft_is_long_copies() -> None:
    """Drafter.copies: the draft at the context's end is COPY_PIECES long (a copy that has run 8 pieces
    drafts 8: min(K, the match, depth - match)); one piece shorter, it does not."""
    assert await drafter().copies("P" + FILE + " Z Z" + FILE[: 2 * COPY_PIECES])
    assert not await drafter("short").copies("P" + FILE + " Z Z" + FILE[: 2 * (COPY_PIECES - 1)])
    assert not await drafter("alone").copies("P" + FILE[: 4 * 26])  # 26 pairs, none twice: nothing to copy


async def test_the_same_request_again_copies_the_earlier_answer() -> None:
    """Its prompt's end is in the shared tree, before the earlier answer."""
    prompt = "P" + FILE[: 2 * 20]
    drafter().finish(prompt, " K L M N O P Q R S")
    assert await drafter().copies(prompt)
    assert not await drafter("other").copies(prompt)
