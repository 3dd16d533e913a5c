"""Prompt lookup: no model, the text that followed the latest earlier occurrence of the context's end."""

from __future__ import annotations

from pathlib import Path

from utils.engine.drafters.base import Branch, Draft, Drafter, DraftSetup
from utils.engine.pieces import Pieces, as_pieces
from utils.engine.tokenizers import vocabulary
from utils.sampling import SamplingOptions

LOOKUP = "lookup"
# Asked for a tree, the earlier occurrences of the matched end read for other continuations, newest
# first: a bound, since a common end (an indentation, a closing brace) may occur thousands of times.
BRANCH_TRIES = 16


class PromptLookupDrafter(Drafter):
    """Editing and summarising answers repeat long runs of their prompt, which this finds for free.

    The continuation is cut into the pieces the target would write (pieces.py) because the validator
    accepts a piece only when it equals the target's token there.
    Its pieces carry no probabilities, so sampled answers are verified by sample-match. Asked for a
    tree, the older occurrences of the same end that went on otherwise give the branches.
    """

    kind = LOOKUP
    name = LOOKUP
    free = True
    description = "prompt lookup, no model"

    def __init__(self, vocabulary: set[str] | Pieces, *, min_match: int = 12, max_match: int = 64):
        self.pieces = as_pieces(vocabulary)
        self.longest_piece = self.pieces.longest
        self.min_match, self.max_match = min_match, max_match

    @classmethod
    async def create(cls, choice: str, setup: DraftSetup) -> PromptLookupDrafter:
        _, pieces = await vocabulary(setup.target, setup.target_model, setup.memory)
        return cls(pieces)

    @classmethod
    def llama_server_args(cls, k: str, model_path: Path | None) -> list[str] | None:
        return ["--spec-type", "ngram-simple"] + ([] if k == "auto" else ["--spec-ngram-simple-size-m", k])

    async def propose(self, context: str, k: int, options: SamplingOptions, width: int = 1) -> Draft:
        if k <= 0:
            return Draft()
        limit = k * self.longest_piece
        continuation, match, at = self._continuation(context, limit)
        pieces = self.pieces.after(context, continuation, k)
        # One estimate for every piece: the longer the end that matched, the likelier a copy.
        draft = Draft(pieces=pieces, confidence=[match / self.max_match] * len(pieces))
        if width > 1 and pieces:
            draft.branches = self._branches(context, draft, match, at, limit, width - 1)
        return draft

    def _continuation(self, context: str, limit: int) -> tuple[str, int, int]:
        """Longest suffix (min_match..max_match chars) that occurred earlier: what came after it (at
        most `limit` characters), the suffix's length, and where that occurrence begins (-1: none)."""
        for size in (self.max_match, 32, 16, self.min_match):
            if size > len(context) // 2:
                continue
            suffix = context[-size:]
            at = context.rfind(suffix, 0, len(context) - 1)
            if at >= 0:
                start = at + size
                return context[start : start + limit], size, at
        return "", 0, -1

    def _branches(self, context: str, draft: Draft, match: int, at: int, limit: int, most: int) -> list[Branch]:
        """The continuations of older occurrences of the matched end (BRANCH_TRIES at most, newest
        first), each from the first piece where it parts from the draft: a text edited more than once
        goes on in one of its earlier versions. One branch per first piece and position, each piece
        with the main chain's estimate (the same match)."""
        suffix, k = context[-match:], len(draft)
        texts = {context[at + match : at + match + limit]}
        seen: set[tuple[int, str]] = set()
        found: list[Branch] = []
        for _ in range(BRANCH_TRIES):
            at = context.rfind(suffix, 0, at + match - 1)  # the next older one, overlaps included
            if at < 0 or len(found) == most:
                break
            text = context[at + match : at + match + limit]
            if text in texts:
                continue
            texts.add(text)
            pieces = self.pieces.after(context, text, k)
            parts = next((i for i, (a, b) in enumerate(zip(pieces, draft.pieces)) if a != b), min(len(pieces), k))
            if parts < min(len(pieces), k) and (parts, pieces[parts]) not in seen:
                seen.add((parts, pieces[parts]))
                value = draft.confidence[0]
                found.append(Branch(parts, Draft(pieces[parts:], confidence=[value] * (len(pieces) - parts))))
        return found
