"""Prompt lookup: no model, the text that followed the latest earlier occurrence of the context's end."""

from __future__ import annotations

from pathlib import Path

from utils.engine.drafters.base import Draft, Drafter, DraftSetup
from utils.engine.tokenizers import vocabulary
from utils.sampling import SamplingOptions

LOOKUP = "lookup"


class PromptLookupDrafter(Drafter):
    """Editing and summarising answers repeat long runs of their prompt, which this finds for free.

    The continuation is cut into the target's own token pieces (greedy longest match over its
    vocabulary) because the validator accepts a piece only when it equals the target's token there.
    Its pieces carry no probabilities, so sampled answers are verified by sample-match.
    """

    kind = LOOKUP
    name = LOOKUP
    free = True
    description = "prompt lookup, no model"

    def __init__(self, vocabulary: set[str], *, min_match: int = 12, max_match: int = 64):
        self.vocabulary = vocabulary
        self.longest_piece = max((len(p) for p in vocabulary), default=1)
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
        continuation, match = self._continuation(context, k * self.longest_piece)
        pieces = self._split(continuation, k)
        # One estimate for every piece: the longer the end that matched, the likelier a copy.
        return Draft(pieces=pieces, confidence=[match / self.max_match] * len(pieces))

    def _continuation(self, context: str, limit: int) -> tuple[str, int]:
        """Longest suffix (min_match..max_match chars) that occurred earlier: what came after it, and
        the suffix's length."""
        for size in (self.max_match, 32, 16, self.min_match):
            if size > len(context) // 2:
                continue
            suffix = context[-size:]
            at = context.rfind(suffix, 0, len(context) - 1)
            if at >= 0:
                start = at + size
                return context[start : start + limit], size
        return "", 0

    def _split(self, text: str, k: int) -> list[str]:
        pieces: list[str] = []
        at = 0
        while at < len(text) and len(pieces) < k:
            for size in range(min(self.longest_piece, len(text) - at), 0, -1):
                if text[at : at + size] in self.vocabulary:
                    pieces.append(text[at : at + size])
                    at += size
                    break
            else:
                break  # not a piece of this vocabulary: the target will not produce it as one token
        return pieces
