"""A draft: the pieces a drafter proposes, with what the controller and the validator read of them.

A plain data type with no imports of the engine, so that every part may use it (drafters make drafts,
the controller and its tree policy shape them, the validator verifies them).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Draft:
    pieces: list[str] = field(default_factory=list)
    # For rejection sampling: the draft's top log-probabilities at each position (raw, as Ollama gives).
    top_logprobs: list[dict[str, float]] = field(default_factory=list)
    # The drafter's own estimate, in [0, 1], that each piece survives if the ones before it did (a
    # draft model's probability, a suffix tree's count ratio); the controller learns how far to trust
    # it (controller.py `cut`). Empty: the drafter has no estimate, and only the position counts.
    confidence: list[float] = field(default_factory=list)
    # Where a drafter with several sources found it (the suffix drafter: "answer" for this answer's own
    # tree, "shared" for earlier answers'): the controller calibrates each source's confidences apart.
    source: str = ""
    # Other continuations the drafter finds likely (a tree: tree verification, issue 43). Empty: a chain.
    branches: list[Branch] = field(default_factory=list)

    def __len__(self) -> int:
        """The main chain's pieces (the draft length K); `rows` counts the branches' pieces too."""
        return len(self.pieces)

    @property
    def rows(self) -> int:
        """Pieces to verify, every branch's included: a tree of R pieces is R + 1 one-token requests."""
        return len(self.pieces) + sum(len(branch.draft) for branch in self.branches)

    def head(self, length: int) -> Draft:
        """The first `length` pieces, with what goes with them: the branches that part from them, no
        deeper than `length` either."""
        branches = [Branch(b.at, b.draft.head(length - b.at)) for b in self.branches if b.at < min(length, len(self))]
        return Draft(self.pieces[:length], self.top_logprobs[:length], self.confidence[:length], self.source,
                     branches)

    def chain(self) -> Draft:
        """The main chain alone."""
        return Draft(self.pieces, self.top_logprobs, self.confidence, self.source)

    def path(self, branch: int | None) -> list[str]:
        """The pieces along the main chain, or along branch number `branch` (the main chain up to it)."""
        if branch is None:
            return self.pieces
        at = self.branches[branch].at
        return self.pieces[:at] + self.branches[branch].draft.pieces

    def graded(self, text: str) -> tuple[int, int]:
        """Held against `text`, what the target wrote after it was proposed: (accepted, decided), the
        pieces the text goes on with, then one more if the text contradicts the next (one it has not
        reached yet is undecided). As text: where the target splits the same text into other tokens
        the validator would reject what counts as accepted here, a small error in an estimate."""
        position = accepted = 0
        for piece in self.pieces:
            if not text.startswith(piece, position):
                break
            position += len(piece)
            accepted += 1
        rejected = accepted < len(self.pieces) and not self.pieces[accepted].startswith(text[position:])
        return accepted, accepted + rejected


@dataclass
class Branch:
    """Another continuation of a draft: `draft`'s pieces instead of the main chain's from position
    `at` on (at < the main chain's length). Its first piece differs from the main chain's piece there
    and from every other branch's at the same position; its confidences are as the main chain's (the
    first: how likely the target writes that piece at `at`). A branch has no branches of its own: a
    tree here is a main chain and side chains, each verified a row per piece."""

    at: int
    draft: Draft
