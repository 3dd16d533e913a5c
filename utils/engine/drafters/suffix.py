"""Suffix decoding (SuffixDecoding, arXiv 2411.04975; ArcticInference and vLLM's `method: "suffix"`): no
model, the likeliest continuation of the context's end in suffix trees of this answer and of earlier ones.

Two trees over the target's token pieces, each a suffix trie cut at depth `MAX_DEPTH` whose node counts
how often its piece sequence occurred:

- the answer's own tree: its prompt and what it has generated so far, extended piece by piece as the
  context grows (one per answer in progress; a later context that extends an earlier one, such as the
  next turn of a chat, goes on with the same tree);
- the target's shared tree: the answers finished for that target in this process, each with the end of
  its prompt (the pieces that led to it), at most `MAX_ANSWERS` answers and `MAX_NODES` nodes, the
  oldest answers evicted first (FIFO, as ArcticInference's `max_cached_requests`). One per target
  (server and model), never shared between targets.

A proposal tries every length d of the context's end that occurs in a tree, follows the most frequent
child from there while the running product of count ratios (child / node) stays at or above
`MIN_TOKEN_PROB`, for at most min(K, `MAX_SPEC_FACTOR` x d) pieces (and `MAX_DEPTH` - d: the tree's
depth bounds match plus draft), and keeps the draft with the highest score (the sum of those
probabilities), the longer match on a tie; the better of the two trees' drafts wins. The defaults are
vLLM's for `method: "suffix"` (depth 24, factor 1.0, probability 0.1).
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from utils.engine.drafters.base import Draft, Drafter, DraftSetup
from utils.engine.tokenizers import vocabulary
from utils.sampling import SamplingOptions

SUFFIX = "suffix"
MAX_DEPTH = 24  # vLLM suffix_decoding_max_tree_depth
MAX_SPEC_FACTOR = 1.0  # vLLM suffix_decoding_max_spec_factor: draft <= factor x match length
MIN_TOKEN_PROB = 0.1  # vLLM suffix_decoding_min_token_prob (the paper's threshold)
MAX_ANSWERS = 1000  # answers kept per target (vLLM: 10,000; here MAX_NODES is usually the bound that acts)
MAX_NODES = 1_000_000  # nodes per target's shared tree: about 23 MB measured (12 bytes a node + branches)
PROMPT_TAIL = MAX_DEPTH - 1  # pieces of the prompt kept before each answer in the shared tree
MATCH_WEIGHT = 4  # a match of this many pieces weighs a piece's count ratio by half (confidence)
OPEN_ANSWERS = 8  # answer trees a drafter keeps (answers in progress at once; the next turn of a chat)


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
                if best >= 0 and child != best and seen > count[best]:
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
    """ArcticInference's path speculation over every match length; `active[d - 1]` matches the last d."""
    count, best_of, token_of, depth = tree.count, tree.best, tree.token, tree.depth
    best = Proposal()
    for length, node in enumerate(active, 1):
        if best_of[node] < 0:  # no continuation for this end, nor for any longer one
            break
        limit = min(k, int(length * factor + 1e-6), depth - length)
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


class _Store:
    """What one target's drafters share: its piece ids and the tree of its finished answers."""

    def __init__(self, max_answers: int, max_nodes: int, depth: int):
        self.vocabulary: set[str] | None = None
        self.reach: dict[str, int] = {}
        self.ids: dict[str, int] = {}
        self.texts: list[str] = []
        self.tree = SuffixTree(depth)
        self.answers: deque[list[int]] = deque()
        self.max_answers, self.max_nodes = max_answers, max_nodes
        self.version = 0  # changes whenever the tree does

    def add(self, tokens: list[int]) -> None:
        """A finished answer, then the oldest answers out until both bounds hold."""
        tokens = tokens[-(self.max_nodes // self.tree.depth):]  # one answer alone stays within the bound
        if not tokens or self.max_answers <= 0:
            return
        self.tree.extend([], tokens)
        self.answers.append(tokens)
        while len(self.answers) > self.max_answers or self.tree.nodes > self.max_nodes:
            self.tree.remove(self.answers.popleft())
        self.version += 1


_stores: dict[str, _Store] = {}


def suffix_store(target: str, max_answers: int = MAX_ANSWERS, max_nodes: int = MAX_NODES,
                 depth: int = MAX_DEPTH) -> _Store:
    """The process's store for `target` (its server and model), made on first use."""
    if target not in _stores:
        _stores[target] = _Store(max_answers, max_nodes, depth)
    return _stores[target]


def clear_suffix_trees() -> None:
    """Forgets every target's finished answers (the tests start each from nothing)."""
    _stores.clear()


@dataclass(eq=False)
class _Open:
    """One answer's tree, over the text read so far, and where its end stands in the shared tree."""

    text: str
    tree: SuffixTree
    tokens: list[int] = field(default_factory=list)  # its last pieces, depth of them
    active: list[int] = field(default_factory=list)
    shared: list[int] = field(default_factory=list)
    version: int = -1


class SuffixDrafter(Drafter):
    """Answers that repeat their prompt or earlier answers (agents, edits, the same request again).

    The context is cut into the target's own token pieces (greedy longest match over its vocabulary,
    as prompt lookup does), only where it is new since the last proposal. Its pieces carry no
    probabilities, so sampled answers are verified by sample-match. A proposal at a 4,000-piece context
    costs about 15 us (40 us with a shared tree that matches); an answer's first proposal reads its
    whole prompt (about 40 ms for 3,000 pieces), and `finish` adds an answer in about 10 ms.
    """

    kind = SUFFIX
    name = SUFFIX
    free = True
    description = "suffix decoding: this answer's and earlier answers' continuations, no model"

    def __init__(self, vocabulary: set[str], target: str = "", *, depth: int = MAX_DEPTH,
                 factor: float = MAX_SPEC_FACTOR, min_prob: float = MIN_TOKEN_PROB,
                 max_answers: int = MAX_ANSWERS, max_nodes: int = MAX_NODES):
        self.vocabulary = vocabulary
        self.depth, self.factor, self.min_prob = depth, factor, min_prob
        self.store = suffix_store(target, max_answers, max_nodes, depth)  # the bounds of its first drafter
        if self.store.vocabulary is not vocabulary:  # read once per target: 0.1 s for 150,000 pieces
            self.store.vocabulary, self.store.reach = vocabulary, {}
            for piece in vocabulary:  # the longest piece that starts with each two characters
                self.store.reach[piece[:2]] = max(self.store.reach.get(piece[:2], 0), len(piece))
        self.reach = self.store.reach
        self.open: deque[_Open] = deque(maxlen=OPEN_ANSWERS)

    @classmethod
    def llama_server_args(cls, k: str, model_path: Path | None) -> list[str] | None:
        """llama.cpp's nearest kind: `ngram-mod`, n-grams hashed across every request of the server
        (what Ollama 0.30+ users can switch on with LLAMA_ARG_SPEC_TYPE=ngram-mod)."""
        return ["--spec-type", "ngram-mod"] + ([] if k == "auto" else ["--spec-ngram-mod-n-max", k])

    @classmethod
    async def create(cls, choice: str, setup: DraftSetup) -> SuffixDrafter:
        _, pieces = await vocabulary(setup.target, setup.target_model)
        return cls(pieces, f"{setup.target.url} {setup.target_model}")

    async def propose(self, context: str, k: int, options: SamplingOptions) -> Draft:
        if k <= 0:
            return Draft()
        answer = self._read(context)
        if answer.version != self.store.version:  # answers were added or evicted: find the end again
            answer.shared = self.store.tree.suffixes(answer.tokens)
            answer.version = self.store.version
        own = speculate(answer.tree, answer.active, k, self.factor, self.min_prob)
        shared = speculate(self.store.tree, answer.shared, k, self.factor, self.min_prob)
        best = own if own.score >= shared.score else shared
        texts = self.store.texts
        pieces: list[str] = []
        for token in best.tokens:
            if token < 0:  # a character the vocabulary has no piece for: the target writes it otherwise
                break
            pieces.append(texts[token])
        return Draft(pieces=pieces, confidence=confidence(best)[: len(pieces)])

    def finish(self, prompt: str, output: str) -> None:
        """An answer is complete: it goes into its target's shared tree, after the end of its prompt."""
        tail = self.tokens(prompt[-PROMPT_TAIL * 16:])[-PROMPT_TAIL:] if prompt else []
        self.store.add(tail + self.tokens(output))

    def _read(self, context: str) -> _Open:
        """The answer tree that `context` extends, brought up to it (a new one if none does)."""
        found = max((a for a in self.open if context.startswith(a.text)), key=lambda a: len(a.text), default=None)
        if found is None:
            found = _Open("", SuffixTree(self.depth))
        else:
            self.open.remove(found)
        self.open.append(found)
        if len(context) > len(found.text):
            new = self.tokens(context[len(found.text):])
            found.text = context
            found.tokens = (found.tokens + new)[-self.depth:]
            found.active = found.tree.extend(found.active, new)
            if found.version == self.store.version:
                for token in new:
                    found.shared = self.store.tree.follow(found.shared, token)
        return found

    def tokens(self, text: str) -> list[int]:
        """`text` as piece ids: at each place the longest piece of the vocabulary; a character that is
        no piece gets an id below 0 (it matches, but is never drafted)."""
        ids, store, vocabulary, reach = [], self.store, self.vocabulary, self.reach
        at, size = 0, len(text)
        while at < size:
            piece = text[at]
            for length in range(min(reach.get(text[at : at + 2], 1), size - at), 1, -1):
                if text[at : at + length] in vocabulary:
                    piece = text[at : at + length]
                    break
            token = store.ids.get(piece)
            if token is None:
                token = len(store.texts) if piece in vocabulary else -1 - len(store.texts)
                store.ids[piece] = token
                store.texts.append(piece)
            ids.append(token)
            at += len(piece)
        return ids
