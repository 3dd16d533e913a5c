"""The clairvoyant schedule's arithmetic (`cli.py bench-ceiling`, ceiling.py): the cheapest way through
a known answer, given what each draft at each position gets accepted and what verifying costs.

At each position either one standard token, or a draft of some K that yields its accepted tokens and
the target's own token after them, or (trees, issue 43) the tree head(K), which greedy verification
follows down the main chain and, at its first wrong piece, down the branch whose first piece is
right. Dynamic programming from the answer's end finds the least time; no controller can beat it,
since it knows every verdict before asking.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from utils.engine.draft import Branch, Draft

MAX_ROWS = 24  # the longest burst measured: a larger tree is not priced, so never scheduled


class Tree(NamedTuple):
    """The tree head(K) proposed at a position: the tokens it gets accepted, its pieces to verify, its
    branches, and whether the accepted path went down one."""
    accepted: int
    rows: int
    branches: int
    branched: bool


def schedule(choices: list[list[tuple[float, int, bool]]], standard: float) -> tuple[float, int, int]:
    """The least time to produce an answer of len(choices) tokens, the drafts that take it, and how many
    of those went down a branch. choices[i]: the drafts one may verify at position i, each (its cost,
    the tokens it gets accepted, whether by a branch); standard: a standard token's time."""
    n = len(choices)
    best, drafts, branched = [0.0] * (n + 1), [0] * (n + 1), [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        best[i], drafts[i], branched[i] = standard + best[i + 1], drafts[i + 1], branched[i + 1]
        for cost, hits, branch in choices[i]:
            after = min(n, i + hits + 1)  # the accepted pieces, then the target's own token
            if cost + best[after] < best[i]:
                best[i], drafts[i], branched[i] = cost + best[after], drafts[after] + 1, branched[after] + branch
    return best[0], drafts[0], branched[0]


def cheapest(accepted: list[list[int]], standard: float, burst: dict[int, float]) -> tuple[float, int]:
    """The least time to produce an answer of len(accepted) tokens, and the drafts that take it.

    accepted[i][k - 1]: tokens a draft of k pieces at position i gets accepted (only the K the
    drafter could fill there); standard: a standard token's time; burst[k]: verifying k pieces."""
    return schedule(_chains(accepted, burst), standard)[:2]


def cheapest_tree(accepted: list[list[int]], trees: list[list[Tree]], standard: float, burst: dict[int, float],
                  price: Callable[[Tree], float | None]) -> tuple[float, int, int]:
    """As `cheapest`, a tree head(K) too at each position (trees[i][k - 1], at `price`; None: not priced):
    the least time, the drafts and those that went down a branch. A tree without branches is the chain."""
    choices = _chains(accepted, burst)
    for row, heads in zip(choices, trees):
        row += [(cost, tree.accepted, tree.branched) for tree in heads
                if tree.branches and (cost := price(tree)) is not None]
    return schedule(choices, standard)


def _chains(accepted: list[list[int]], burst: dict[int, float]) -> list[list[tuple[float, int, bool]]]:
    return [[(burst[k], hits, False) for k, hits in enumerate(row, start=1)] for row in accepted]


def priced(burst: dict[int, float], extra: dict[int, float] | None = None) -> Callable[[Tree], float | None]:
    """A tree's price: a chain burst of its rows (one evaluation); with `extra`, plus what a tree of as
    many branches was measured to cost above that as served (beyond the counts measured, the most
    branches' share per branch)."""
    def price(tree: Tree) -> float | None:
        if tree.rows not in burst:
            return None
        if not extra:
            return burst[tree.rows]
        most = max(extra)
        return burst[tree.rows] + extra.get(tree.branches, extra[most] / most * tree.branches)
    return price


def eager(accepted: list[list[int]], standard: float, burst: dict[int, float]) -> float:
    """The time of the rule llama.cpp's lookup follows: draft all the drafter finds, wherever it finds it."""
    i, seconds = 0, 0.0
    while i < len(accepted):
        if accepted[i]:
            seconds += burst[len(accepted[i])]
            i += accepted[i][-1] + 1
        else:
            seconds += standard
            i += 1
    return seconds


def agreeing(pieces: list[str], truth: list[str]) -> int:
    """How many of `pieces` agree with the tokens that really follow, from the first on."""
    hits = 0
    while hits < min(len(pieces), len(truth)) and pieces[hits] == truth[hits]:
        hits += 1
    return hits


def tree_accepted(draft: Draft, truth: list[str]) -> tuple[int, bool]:
    """What greedy verification accepts of a tree against the tokens that really follow, and whether by
    a branch: the main chain while it agrees, then, at its first wrong piece, the branch from there
    whose first piece is the right one, as far as it agrees."""
    hits = agreeing(draft.pieces, truth)
    if hits < min(len(draft), len(truth)):
        for branch in draft.branches:
            if branch.at == hits and branch.draft.pieces[:1] == truth[hits:hits + 1]:
                return hits + agreeing(branch.draft.pieces, truth[hits:]), True
    return hits, False


def graded(draft: Draft, truth: list[str]) -> Tree:
    accepted, branched = tree_accepted(draft, truth)
    return Tree(accepted, draft.rows, len(draft.branches), branched)


def shapes(tokens: list[str], k_max: int, width: int) -> list[Draft]:
    """Trees to time as served, made of an answer's tokens: a main chain of K = k_max - 4..k_max with,
    at its middle, one branch of 1, 2 or 4 pieces, or width - 1 branches of 2 (no deeper than the main
    chain, as head(K) keeps them). A branch is the answer's tokens from a little further on: real
    pieces, most unlike the main chain's at the branch."""
    trees: list[Draft] = []
    for k in range(max(1, k_max - 4), k_max + 1):
        at = k // 2
        for lengths in ([1], [2], [4], [2] * (width - 1)):
            branches = [Branch(at, Draft(tokens[at + 1 + j:at + 1 + j + min(n, k - at)]))
                        for j, n in enumerate(lengths)]
            tree = Draft(tokens[:k], branches=branches)
            whole = len(tree) == k and all(len(b.draft) for b in branches)  # not cut short by the answer's end
            if whole and tree.rows <= MAX_ROWS and shape_name(tree) not in map(shape_name, trees):
                trees.append(tree)
    return trees


def shape_name(tree: Draft) -> str:
    """A tree's shape in words: 'K=6 + 2 at 3'."""
    return f"K={len(tree)} + {'+'.join(str(len(b.draft)) for b in tree.branches)} at {tree.branches[0].at}"
