"""A small model on an Ollama server drafts: the classic speculative decoding."""

from __future__ import annotations

import math
import time
from pathlib import Path

from utils.engine.drafters.base import Branch, Draft, Drafter, DraftSetup
from utils.engine.target import RequestRefused, ServerError, Target, Token
from utils.engine.tokenizers import tokenizer_relation
from utils.sampling import SamplingOptions

# Asked for a tree, a draft piece less likely than this gets the draft's next choice there as a
# one-piece branch: at 0.8 and above the second choice has at most 0.2, seldom worth a row to verify.
BRANCH_BELOW = 0.8


class ModelDrafter(Drafter):
    """A draft model streamed raw with logprobs; chosen by the draft model's name.

    Drafting stops at K pieces, at a piece whose probability is below `p_min`, at a piece that is only
    part of a character, or at the end of text; a draft shorter than `n_min` is dropped. Stopping
    closes the stream, so the server stops too. Asked for a tree, it adds the draft's second choice
    where it was unsure (`_branches`): the same model call, no other.
    """

    description = "a smaller model of the same family"

    def __init__(self, server: Target, model: str, *, p_min: float, n_min: int, top_k: int,
                 num_ctx: int | None, same_tokenizer: bool = False):
        self.server, self.model, self.name = server, model, model
        self.p_min, self.n_min, self.top_k, self.num_ctx = p_min, n_min, top_k, num_ctx
        # With the target's tokenizer its top log-probabilities are over the target's tokens.
        self.exact_distribution = same_tokenizer

    @classmethod
    async def create(cls, choice: str, setup: DraftSetup) -> ModelDrafter:
        """The drafter, its model loaded (`prepare`): built before an answer, so the load is not timed."""
        relation = await tokenizer_relation(setup.target, setup.target_model, setup.draft_server, choice, setup.memory)
        if relation == "unusable":
            raise RequestRefused(f"'{choice}' cannot draft for '{setup.target_model}' on this server")
        config = setup.config
        drafter = cls(setup.draft_server, choice, p_min=config.p_min, n_min=config.n_min, top_k=config.draft_top_k,
                      num_ctx=config.num_ctx, same_tokenizer=relation == "same")
        await drafter.prepare()
        return drafter

    @classmethod
    def llama_server_args(cls, k: str, model_path: Path | None) -> list[str] | None:
        if model_path is None:
            return None
        limit = [] if k == "auto" else ["--spec-draft-n-max", k]
        return ["--spec-type", "draft-simple", "-md", str(model_path), *limit]

    async def prepare(self) -> float:
        """Load the draft model where its server does not hold it (as its drafts will ask for it: the
        same num_ctx), with a one-token request, so that no timed draft includes the load. A failure
        is left for the first draft to report."""
        started = time.perf_counter()
        try:
            for model in await self.server.running():
                if self.model in (model.get("name"), model.get("model")) and (
                        not self.num_ctx or model.get("context_length") in (None, self.num_ctx)):
                    return 0.0
            await self.server.next_token(self.model, "\n", {"temperature": 0, **self._context()})
        except ServerError:
            return 0.0
        return time.perf_counter() - started

    def _context(self) -> dict[str, int]:
        """Only a context asked for on purpose: another one would reload the draft model."""
        return {"num_ctx": self.num_ctx} if self.num_ctx else {}

    async def propose(self, context: str, k: int, options: SamplingOptions, width: int = 1) -> Draft:
        draft = Draft()
        if k <= 0:
            return draft
        request = options.to_ollama()
        # The draft samples from at most its top_k candidates, all of which it reports back.
        request.update(num_predict=k, top_k=min(options.top_k or self.top_k, self.top_k), **self._context())
        async for chunk in self.server.stream_raw(self.model, context, request, self.top_k):
            if self._extend(draft, chunk.tokens, k) or chunk.done_reason is not None:
                break
        if len(draft) < self.n_min:
            return Draft()
        if width > 1:
            draft.branches = self._branches(draft, width - 1)
        return draft

    @staticmethod
    def _branches(draft: Draft, most: int) -> list[Branch]:
        """At the draft's least sure positions (below BRANCH_BELOW), the likeliest other candidate of its
        top log-probabilities, a whole piece, as a one-piece branch: where the draft model hesitated
        between two pieces the target often takes the other. Its distribution is the main piece's
        (the same context), so rejection sampling can verify it too."""
        found: list[Branch] = []
        unsure = sorted((value, at) for at, value in enumerate(draft.confidence) if value < BRANCH_BELOW)
        for _, at in unsure:
            if len(found) == most:
                break
            others = [(logprob, text) for text, logprob in draft.top_logprobs[at].items()
                      if text and text != draft.pieces[at] and "\ufffd" not in text]
            if others:
                logprob, text = max(others)
                found.append(Branch(at, Draft([text], [draft.top_logprobs[at]], [math.exp(logprob)])))
        return found

    def _extend(self, draft: Draft, tokens: list[Token], k: int) -> bool:
        """Add confident, whole-character tokens to `draft`; True once drafting should stop."""
        for token in tokens:
            confident = token.logprob is None or math.exp(token.logprob) >= self.p_min
            if not (token.complete and token.text and confident):
                return True
            draft.pieces.append(token.text)
            draft.top_logprobs.append(token.top)
            draft.confidence.append(1.0 if token.logprob is None else math.exp(token.logprob))
            if len(draft) == k:
                return True
        return False
