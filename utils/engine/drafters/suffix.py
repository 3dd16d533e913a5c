"""Suffix decoding (SuffixDecoding, arXiv 2411.04975; ArcticInference and vLLM's `method: "suffix"`): no
model, the likeliest continuation of the context's end in suffix trees of this answer and of earlier ones.

Two trees over the target's token pieces (`utils/engine/suffix_tree.py`), each a suffix trie cut at
depth `MAX_DEPTH` whose node counts how often its piece sequence occurred:

- the answer's own tree: its prompt and what it has generated so far, extended piece by piece as the
  context grows (one per answer in progress; a later context that extends an earlier one, such as the
  next turn of a chat, goes on with the same tree);
- the target's shared tree: the answers finished for that target in this process, each with the end of
  its prompt (the pieces that led to it), at most `MAX_ANSWERS` answers and `MAX_NODES` nodes, the
  oldest answers evicted first (FIFO, as ArcticInference's `max_cached_requests`). One per target
  (server and model), never shared between targets.

A proposal tries every length d of the context's end that occurs in a tree, follows the most frequent
child from there (the latest seen on a tie: an edit repeats the newest version) while the running
product of count ratios (child / node) stays at or above `MIN_TOKEN_PROB`, for at most
min(K, `MAX_SPEC_FACTOR` x d) pieces (and `MAX_DEPTH` - d: the tree's depth bounds match plus draft),
and keeps the draft with the highest score (the sum of those probabilities), the longer match on a
tie; the better of the two trees' drafts wins. The defaults are vLLM's for `method: "suffix"` (depth
24, factor 1.0, probability 0.1).

Asked for a tree (SuffixDecoding's tree mode), the other children along the winning tree's path whose
running product stays at or above `MIN_TOKEN_PROB` are followed the same way, the likeliest first,
as branches (`SuffixDrafter._branches`).

Text is cut into pieces the same way wherever it occurs, so that a copy matches its original; only
the context's last characters are matched as text (`SuffixDrafter`). Before, the context's end was
cut on its own and missed the copy wherever the target had split the text otherwise than the prompt
was cut (JSON and indentation above all): docs/performance.md has what that cost."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path

from utils.engine.drafters.base import Branch, Draft, Drafter, DraftSetup
from utils.engine.memory import EngineMemory
from utils.engine.pieces import Pieces, as_pieces
from utils.engine.suffix_tree import (
    MAX_DEPTH,
    MAX_SPEC_FACTOR,
    MIN_TOKEN_PROB,
    Proposal,
    SuffixTree,
    confidence,
    speculate,
)
from utils.engine.tokenizers import vocabulary
from utils.sampling import SamplingOptions

SUFFIX = "suffix"
MAX_ANSWERS = 1000  # answers kept per target (vLLM: 10,000; here MAX_NODES is usually the bound that acts)
MAX_NODES = 1_000_000  # nodes per target's shared tree: about 23 MB measured (12 bytes a node + branches)
PROMPT_TAIL = MAX_DEPTH - 1  # pieces of the prompt kept before each answer in the shared tree
OPEN_ANSWERS = 8  # answer trees a drafter keeps (answers in progress at once; the next turn of a chat)
# A draft's first pieces are drafted as a draft of this many would be, a longer one continued from
# them (`_longer`): asked for 16 at once, the tree would follow the match that allows 16, shorter and
# less sure than the one an 8-piece draft follows (on the agent workload calls, drafts asked for 16
# had 9 of 30 pieces accepted where those asked for 8 had 18 of 33).
HEAD_PIECES = 8


class _Store:
    """What one target's drafters share: its piece ids and the tree of its finished answers."""

    def __init__(self, max_answers: int, max_nodes: int, depth: int):
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


def suffix_store(memory: EngineMemory, target: str, max_answers: int = MAX_ANSWERS, max_nodes: int = MAX_NODES,
                 depth: int = MAX_DEPTH) -> _Store:
    """`memory`'s store for `target` (its server and model), made on first use."""
    stores: dict[str, _Store] = memory.suffix_stores
    if target not in stores:
        stores[target] = _Store(max_answers, max_nodes, depth)
    return stores[target]


@dataclass(eq=False)
class _Open:
    """One answer's tree over the context's pieces whose boundaries are final (`text`), and where its
    end stands in the shared tree."""

    text: str
    tree: SuffixTree
    tokens: list[int] = field(default_factory=list)  # its last pieces, depth of them
    active: list[int] = field(default_factory=list)
    shared: list[int] = field(default_factory=list)
    version: int = -1


class SuffixDrafter(Drafter):
    """Answers that repeat their prompt or earlier answers (agents, edits, the same request again).

    Text becomes the target's token pieces as its tokenizer cuts it (pieces.py), the same way
    wherever it occurs (prompt, answer, earlier answers), so that a copy matches its original. A
    piece is added to the answer's tree once it is final (no text after it could change it); the
    context's last characters, whose pieces may still change and which the target may have split
    otherwise, are matched as text: the tree is followed from each point of
    that open tail, and its continuation must begin with the rest of the tail, the draft being what
    comes after, cut into pieces afresh. Its pieces carry no probabilities, so sampled answers are
    verified by sample-match. A proposal one token later costs about 55 us at a 4,000-piece context,
    and an answer's first proposal reads its whole prompt (about 16 ms for 4,000 pieces; both
    `bench-overhead --context 4040`, smollm2's tokenizer); `finish` adds an answer in about 10 ms.
    """

    kind = SUFFIX
    name = SUFFIX
    free = True
    description = "suffix decoding: this answer's and earlier answers' continuations, no model"

    def __init__(self, vocabulary: set[str] | Pieces, target: str = "", *, memory: EngineMemory | None = None,
                 depth: int = MAX_DEPTH,
                 factor: float = MAX_SPEC_FACTOR, min_prob: float = MIN_TOKEN_PROB,
                 max_answers: int = MAX_ANSWERS, max_nodes: int = MAX_NODES):
        self.pieces = as_pieces(vocabulary)  # how the target cuts text (pieces.py)
        self.depth, self.factor, self.min_prob = depth, factor, min_prob
        # Shared with the drafters of the same target and memory; the bounds of its first drafter.
        self.store = suffix_store(memory or EngineMemory(), target, max_answers, max_nodes, depth)
        self.open: deque[_Open] = deque(maxlen=OPEN_ANSWERS)

    @classmethod
    def llama_server_args(cls, k: str, model_path: Path | None) -> list[str] | None:
        """llama.cpp's nearest kind: `ngram-mod`, n-grams hashed across every request of the server
        (what Ollama 0.30+ users can switch on with LLAMA_ARG_SPEC_TYPE=ngram-mod)."""
        return ["--spec-type", "ngram-mod"] + ([] if k == "auto" else ["--spec-ngram-mod-n-max", k])

    @classmethod
    async def create(cls, choice: str, setup: DraftSetup) -> SuffixDrafter:
        _, pieces = await vocabulary(setup.target, setup.target_model, setup.memory)
        return cls(pieces, f"{setup.target.url} {setup.target_model}", memory=setup.memory)

    async def propose(self, context: str, k: int, options: SamplingOptions, width: int = 1) -> Draft:
        if k <= 0:
            return Draft()
        answer = self._read(context)
        store = self.store
        if answer.version != store.version:  # answers were added or evicted: find the end again
            answer.shared = store.tree.suffixes(answer.tokens)
            answer.version = store.version
        # The trees followed from the last final boundary through each piece of the open tail: at
        # each point, the continuation must begin with the rest of the tail. A longer match, then
        # this answer's own tree, wins a tie.
        tail = context[len(answer.text):]
        own, shared, start = answer.active, answer.shared, 0
        best, best_rest, best_source = Proposal(), "", ""
        best_at: tuple[SuffixTree, list[int]] = (store.tree, [])
        pieces = self.tokens(tail)
        for point in range(len(pieces) + 1):
            if point:
                token = pieces[point - 1]
                start += len(self._text(token))
                own, shared = answer.tree.follow(own, token), store.tree.follow(shared, token)
            rest = tail[start:]
            for tree, active, source in ((store.tree, shared, "shared"), (answer.tree, own, "answer")):
                proposal = self._continue(tree, active, rest, min(k, HEAD_PIECES))
                if proposal.tokens and proposal.score >= best.score:
                    best, best_rest, best_source, best_at = proposal, rest, source, (tree, active)
        head = min(k, HEAD_PIECES) + (1 if best_rest else 0)  # what `_continue` asked of the tree
        tokens, values, parts = self._longer(*best_at, best, head, k + 1 if best_rest else k)
        draft = self._cut(context, tokens, values, best_rest, k, best_source)
        if width > 1 and draft.pieces:
            draft.branches = self._branches(context, best_at[0], parts, tokens, values, best_rest, draft, k,
                                            width - 1)
        return draft

    def _longer(self, tree: SuffixTree, active: list[int], proposal: Proposal, asked: int,
                limit: int) -> tuple[list[int], list[float], list[tuple[list[int], Proposal]]]:
        """`proposal` (`asked` pieces were asked for) with its confidences, continued where it stopped
        for want of room (the pieces asked for, or the tree's depth: a match of d pieces drafts at most
        depth - d), not for its probability, the tree's end or a match too short for more (d x
        factor), and more were asked for: the tree followed through the draft as if it had been
        written, and drafted from again, HEAD_PIECES at a time, up to `limit` pieces. So a sure copy
        (a file rewritten) is drafted as far as a long burst may verify; each further piece carries
        its own confidence, which the controller weighs (controller.py, LONG_SURE). Also each part
        drafted with the active nodes it was drafted from: where branches may part from it."""
        tokens, values, part = list(proposal.tokens), self._confidence(tree, active, proposal), proposal
        parts = [(active, proposal)]
        while (part.tokens and len(tokens) < limit and len(part.tokens) >= min(asked, tree.depth - part.match)
               and len(part.tokens) < int(part.match * self.factor + 1e-6)):
            for token in part.tokens:
                active = tree.follow(active, token)
            asked = min(limit - len(tokens), HEAD_PIECES)
            part = speculate(tree, active, asked, self.factor, self.min_prob)
            tokens += part.tokens
            values += self._confidence(tree, active, part)
            parts.append((active, part))
        return tokens, values, parts

    def _branches(self, context: str, tree: SuffixTree, parts: list[tuple[list[int], Proposal]], tokens: list[int],
                  values: list[float], rest: str, draft: Draft, k: int, most: int) -> list[Branch]:
        """SuffixDecoding's tree mode: at each node of the path the draft followed (tree pieces
        `tokens`, confidences `values`, `parts` as `_longer` gives them), each other child whose
        running probability (the product of count ratios to it) is at least `min_prob`, followed by
        its most frequent children as the draft was, no longer than the draft's rest; the likeliest
        first, up to `most`. Each is cut into pieces as the draft is (the draft's text up to it, then
        its own, after `rest`): its branch begins at the first piece where the two differ, and one
        that differs nowhere within the draft, or at a position and first piece taken, is dropped."""
        count, best_of, token_of = tree.count, tree.best, tree.token
        others: list[tuple[float, int, int, float, int, int]] = []  # probability, index, child, at parent ...
        index = 0
        for active, part in parts:
            node, prob = active[part.match - 1], 1.0
            longest = self._longest(tree, active, part)
            room = min(int(part.match * self.factor + 1e-6), tree.depth - part.match)  # as `speculate`'s
            for offset, token in enumerate(part.tokens):
                for other, child in tree.kids.get(node, {}).items():
                    chance = prob * count[child] / count[node]
                    if other != token and chance >= self.min_prob:
                        others.append((chance, index + offset, child, prob, longest, room - offset))
                node, prob = tree.child(node, token), part.probs[offset]
            index += len(part.tokens)
        others.sort(key=lambda other: (-other[0], other[1]))
        found: list[Branch] = []
        taken: set[tuple[int, str]] = set()
        for chance, index, node, before, longest, room in others:
            path, probs = [token_of[node]], [chance]
            while len(path) < min(room, len(tokens) - index) and best_of[node] >= 0:
                child = best_of[node]
                chance *= count[child] / count[node]
                if chance < self.min_prob:
                    break
                path.append(token_of[child])
                probs.append(chance)
                node = child
            ratios = confidence(Proposal(probs=[value / before for value in probs], match=longest))
            text = "".join(self._text(token) for token in tokens[:index] + path)
            if len(text) <= len(rest) or not text.startswith(rest):
                continue  # it parts from the context's open tail, not from the draft
            cut = self._cut(context, tokens[:index] + path, values[:index] + ratios, rest, k, draft.source)
            at = next((i for i, (a, b) in enumerate(zip(cut.pieces, draft.pieces)) if a != b), len(draft))
            if at >= min(len(cut), len(draft)) or (at, cut.pieces[at]) in taken:
                continue
            taken.add((at, cut.pieces[at]))
            # Its first piece is written where the tree parts, whichever tree piece it starts in.
            found.append(Branch(at, Draft(cut.pieces[at:], confidence=[ratios[0], *cut.confidence[at + 1:]],
                                          source=draft.source)))
            if len(found) == most:
                break
        return found

    @staticmethod
    def _confidence(tree: SuffixTree, active: list[int], proposal: Proposal) -> list[float]:
        """Each piece's confidence (suffix_tree.confidence), weighed by the longest match that occurs
        where the one drafted from does (as often: the same places, so the same continuation). The
        draft follows the match that allows the longest draft, 12 pieces in a copy, whatever its
        length; weighed by that, a copy that has run for hundreds of pieces looked no surer than one
        that began 12 pieces ago, and the controller could not tell the two apart (LONG_SURE)."""
        if not proposal.tokens:
            return []
        return confidence(replace(proposal, match=SuffixDrafter._longest(tree, active, proposal)))

    @staticmethod
    def _longest(tree: SuffixTree, active: list[int], proposal: Proposal) -> int:
        """The longest match that occurs where `proposal`'s does (`_confidence`)."""
        longest, count = proposal.match, tree.count[active[proposal.match - 1]]
        while longest < len(active) and tree.count[active[longest]] == count:
            longest += 1
        return longest

    def _continue(self, tree: SuffixTree, active: list[int], rest: str, k: int) -> Proposal:
        """The tree's continuation from `active` if its text begins with `rest`, scored by the pieces
        that reach past `rest` (an empty proposal otherwise)."""
        proposal = speculate(tree, active, k + 1 if rest else k, self.factor, self.min_prob)
        text = ""
        for index, token in enumerate(proposal.tokens):
            text += self._text(token)
            if len(text) > len(rest):
                if not text.startswith(rest):
                    break
                proposal.score = sum(proposal.probs[index:])
                return proposal
            if not rest.startswith(text):
                break
        return Proposal()

    def _cut(self, context: str, tokens: list[int], values: list[float], rest: str, k: int, source: str) -> Draft:
        """The continuation's text (tree pieces `tokens`, confidences `values`) after `rest` in the pieces
        the target would write after `context` (pieces.py), each with the confidence of the tree piece
        it starts in; `source`: the tree it came from."""
        text, owners = "", []
        for token, value in zip(tokens, values):
            written = self._text(token)
            text += written
            owners += [value] * len(written)
        pieces = self.pieces.after(context, text[len(rest):], k)
        kept, at = [], len(rest)
        for piece in pieces:
            kept.append(owners[at])
            at += len(piece)
        return Draft(pieces=pieces, confidence=kept, source=source)

    def _text(self, token: int) -> str:
        return self.store.texts[token if token >= 0 else -1 - token]

    def finish(self, prompt: str, output: str) -> None:
        """An answer is complete: it goes into its target's shared tree, after the end of its prompt."""
        tail = self.tokens(prompt[-PROMPT_TAIL * 16:])[-PROMPT_TAIL:] if prompt else []
        self.store.add(tail + self.tokens(output))

    def _read(self, context: str) -> _Open:
        """The answer tree that `context` extends, brought up to its last final piece boundary (a new
        one if none does)."""
        found = max((a for a in self.open if context.startswith(a.text)), key=lambda a: len(a.text), default=None)
        if found is None:
            found = _Open("", SuffixTree(self.depth))
        else:
            self.open.remove(found)
        self.open.append(found)
        at = len(found.text)
        end = self.pieces.final(context, at)  # pieces past it may still change with the next text
        new = self.tokens(context[at:end])
        at = end
        if new:
            found.text = context[:at]
            found.tokens = (found.tokens + new)[-self.depth:]
            found.active = found.tree.extend(found.active, new)
            if found.version == self.store.version:
                for token in new:
                    found.shared = self.store.tree.follow(found.shared, token)
        return found

    def tokens(self, text: str) -> list[int]:
        """`text` as piece ids, cut as the target cuts it (pieces.py); a piece that is no token of the
        target gets an id below 0 (it matches, but is never drafted)."""
        ids, store, vocabulary = [], self.store, self.pieces.vocabulary
        for piece in self.pieces.cut(text):
            token = store.ids.get(piece)
            if token is None:
                token = len(store.texts) if piece in vocabulary else -1 - len(store.texts)
                store.ids[piece] = token
                store.texts.append(piece)
            ids.append(token)
        return ids
