"""A suffix trie over piece ids, and how suffix decoding drafts from one (`utils/engine/drafters/suffix.py`).

Flat arrays, no Python object per node: a large tree costs the garbage collector nothing. The
defaults are vLLM's for `method: "suffix"` (depth 24, factor 1.0, probability 0.1).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

MAX_DEPTH = 24  # vLLM suffix_decoding_max_tree_depth
MAX_SPEC_FACTOR = 1.0  # vLLM suffix_decoding_max_spec_factor: draft <= factor x match length
MIN_TOKEN_PROB = 0.1  # vLLM suffix_decoding_min_token_prob (the paper's threshold)
MATCH_WEIGHT = 4  # a match of this many pieces weighs a piece's count ratio by half (confidence)


class SuffixTree:
    """A suffix trie over piece ids cut at `depth`: node n (0 is the root) stands for one piece
    sequence, `count[n]` the positions where it starts, `best[n]` its most frequent child (-1: none),
    the only child unless `kids[n]` lists them all. Flat arrays: no Python object per node, so a large
    tree costs the garbage collector nothing and a node about 12 bytes plus its share of `kids`.

    A sequence is added piece by piece through its active nodes (the nodes of its suffixes, by length).
    """

    def __init__(self, depth: int = MAX_DEPTH):
        self.depth = depth
        self.count = array("i", [0])
        self.token = array("i", [-1])
        self.best = array("i", [-1])
        self.kids: dict[int, dict[int, int]] = {}
        self.free: list[int] = []  # node numbers freed by `remove`, used again first
        self.nodes = 1

    def child(self, node: int, token: int) -> int:
        best = self.best[node]
        if best < 0 or self.token[best] == token:
            return best
        kids = self.kids.get(node)
        return -1 if kids is None else kids.get(token, -1)

    def _new(self, token: int) -> int:
        self.nodes += 1
        if self.free:
            node = self.free.pop()
            self.count[node], self.token[node], self.best[node] = 0, token, -1
            return node
        self.count.append(0)
        self.token.append(token)
        self.best.append(-1)
        return len(self.count) - 1

    def extend(self, active: list[int], tokens: list[int]) -> list[int]:
        """Append `tokens` to the sequence whose suffixes of length 1.. end at `active` (a new sequence:
        []); returns its active nodes afterwards, by length, up to depth - 1."""
        count, token_of, best_of, kids_of, last = self.count, self.token, self.best, self.kids, self.depth - 1
        for token in tokens:
            grown = []
            for node in (0, *active):
                best = best_of[node]
                if best >= 0 and token_of[best] == token:
                    child = best
                else:
                    kids = kids_of.get(node)
                    child = -1 if kids is None else kids.get(token, -1)
                    if child < 0:
                        child = self._new(token)
                        if best < 0:
                            best_of[node] = child
                        else:
                            if kids is None:
                                kids = kids_of[node] = {token_of[best]: best}
                            kids[token] = child
                seen = count[child] + 1
                count[child] = seen
                if best >= 0 and child != best and seen >= count[best]:  # the latest wins a tie
                    best_of[node] = child
                grown.append(child)
            active = grown[:last]
        return active

    def remove(self, tokens: list[int]) -> None:
        """Take back a sequence added with `extend`: every count it added, and the nodes left at 0."""
        count, best_of, kids_of = self.count, self.best, self.kids
        depth, size = self.depth, len(tokens)
        for start in range(size):
            node, end = 0, min(start + depth, size)
            for at in range(start, end):
                child = self.child(node, tokens[at])
                if child < 0:  # cannot happen for a sequence that was added
                    break
                count[child] -= 1
                kids = kids_of.get(node)
                if count[child] == 0:  # this occurrence was its only one: it and the chain below go
                    self._free(child, tokens[at + 1 : end])
                    if kids is not None:
                        del kids[tokens[at]]
                    if best_of[node] == child:
                        best_of[node] = max(kids.values(), key=count.__getitem__) if kids else -1
                    if kids is not None and not kids:
                        del kids_of[node]
                    break
                if best_of[node] == child and kids is not None and node:
                    best_of[node] = max(kids.values(), key=count.__getitem__)
                node = child

    def _free(self, node: int, below: list[int]) -> None:
        """`node` and the chain under it along `below` (all of count 1, this sequence's own)."""
        chain = [node]
        for token in below:
            node = self.child(node, token)
            if node < 0:
                break
            chain.append(node)
        for node in chain:
            self.kids.pop(node, None)
            self.best[node] = -1
        self.free += chain
        self.nodes -= len(chain)

    def suffixes(self, tokens: list[int]) -> list[int]:
        """The nodes of the sequence's suffixes that occur here, by length (1, 2, ...)."""
        found: list[int] = []
        start = max(0, len(tokens) - self.depth + 1)
        for length in range(1, len(tokens) - start + 1):
            node = 0
            for token in tokens[len(tokens) - length:]:
                node = self.child(node, token)
                if node < 0:
                    return found
            found.append(node)
        return found

    def follow(self, active: list[int], token: int) -> list[int]:
        """The active nodes once `token` is appended to a sequence that is not stored here."""
        grown = []
        for node in (0, *active):
            child = self.child(node, token)
            if child < 0:
                break
            grown.append(child)
        return grown[: self.depth - 1]


@dataclass
class Proposal:
    """A draft from one tree: piece ids, the probability of each, their sum, the match length."""

    tokens: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    score: float = 0.0
    match: int = 0


def speculate(tree: SuffixTree, active: list[int], k: int, factor: float = MAX_SPEC_FACTOR,
              min_prob: float = MIN_TOKEN_PROB) -> Proposal:
    """ArcticInference's path speculation over every match length; `active[d - 1]` matches the last d.

    Longer matches with the same count occur at the same places (each occurrence of the shorter end
    has the longer one), so they continue the same way: of such a run only the length that allows
    the longest draft is followed, the longest on a tie, as following each in turn would choose."""
    count, best_of, token_of, depth = tree.count, tree.best, tree.token, tree.depth
    best = Proposal()
    size, first = len(active), 0
    while first < size:
        node = active[first]
        if best_of[node] < 0:  # no continuation for this end, nor for any longer one
            break
        last = first
        while last + 1 < size and count[active[last + 1]] == count[node]:
            last += 1
        limit, length = max((min(k, int(d * factor + 1e-6), depth - d), d) for d in range(first + 1, last + 2))
        node, first = active[length - 1], last + 1
        tokens: list[int] = []
        probs: list[float] = []
        prob, score = 1.0, 0.0
        while len(tokens) < limit:
            child = best_of[node]
            if child < 0:
                break
            prob *= count[child] / count[node]
            if prob < min_prob:
                break
            tokens.append(token_of[child])
            probs.append(prob)
            score += prob
            node = child
        if tokens and score >= best.score:
            best = Proposal(tokens, probs, score, length)
    return best


def confidence(proposal: Proposal) -> list[float]:
    """Each piece's survival estimate: its count ratio (the running probability over the one before),
    weighed by how long a match it continues, m / (m + 4), since a ratio of 1 after a 2-piece match is
    one occurrence, and after a 16-piece one a copy. The controller calibrates it by what it measures."""
    weight = proposal.match / (proposal.match + MATCH_WEIGHT)
    ratios = [b / a for a, b in zip([1.0, *proposal.probs], proposal.probs)]
    return [ratio * weight for ratio in ratios]
