"""The prompt-prefix raw-mode validator: the target's own next token at every draft position at once.

For a draft d1..dK it sends K+1 concurrent raw requests with `num_predict` 1 whose prompts are
context, context+d1, ..., context+d1..dK. On a server that batches them (the embedded one, or Ollama
with OLLAMA_NUM_PARALLEL >= K+1) this costs about one evaluation of K tokens.

A draft piece is accepted only when it equals, as text, the target's token at that position; then
the target's token after the accepted run is emitted as well (the correction, or the bonus token
after a fully accepted draft). Everything emitted is therefore a token the target chose, and the
comparison works across tokenizers.

Acceptance methods:
- greedy (temperature 0): every request is greedy; output equals standard greedy generation.
- sample-match (temperature > 0, any draft): each request samples with its own seed and a draft
  piece is accepted while the target's sample equals it. Each emitted token is a fresh sample from
  the target's distribution, so the distribution is exactly the target's.
- rejection (temperature > 0, draft with the target's tokenizer, top_k <= 20): the standard
  speculative-sampling rule on the target's and draft's top-20 log-probabilities: accept x with
  probability min(1, p(x)/q(x)), else draw from max(0, p - q). Exact, and accepts more often than
  sample-match because a draft token that is likely but not the one drawn can still be kept.

Trees (Draft.branches: side chains that part from the main chain at a position) are verified the
same way, one request per node (`node_prompts`): greedy and sample-match follow the main chain while
the target's token equals its piece, and where it does not, the branch that begins with that token.
Sample-match stays exact with a tree: each node's request samples with its own seed, and the path
only ever reads one sample per position it reaches, the sample of the node it is at; which node that
is depends only on the samples before it. So every emitted token is a fresh draw from the target's
distribution given the tokens before it, exactly as standard sampling, whatever the tree proposed
(SpecInfer's multi-draft rule would accept more often, but needs the drafts' distributions). Rejection
sampling verifies chains only: with several candidates at a position its one-candidate rule is no
longer exact, so the decoder drops a draft's branches for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from utils.engine.drafters import Draft
from utils.engine.events import Origin
from utils.engine.stats import Method
from utils.engine.target import AnswerFormat, Step, Target
from utils.sampling import SamplingOptions, text_distribution

END = ""  # how an end-of-text token appears among top log-probabilities
MAX_TOP_LOGPROBS = 20


@dataclass
class Verdict:
    accepted: int = 0  # draft pieces accepted
    pieces: list[tuple[str, Origin]] = field(default_factory=list)  # (text, origin) to emit, in order
    ended: bool = False  # the target ends its text after `pieces`
    prompt_tokens: int = 0  # the target's token count of the context
    # In sample-match mode, the seed of the position where an unusable token stopped the round:
    # standard generation resumes with it so that the same sample is drawn there.
    resume_seed: int | None = None
    branch: int | None = None  # a tree's branch the accepted path followed (Draft.branches), if any


def choose_method(options: SamplingOptions, exact_distribution: bool) -> Method:
    """How to verify: `exact_distribution` says the drafter's and the server's log-probabilities are
    the distributions they sample from (Drafter.exact_distribution, Target.exact_logprobs)."""
    if options.greedy:
        return "greedy"
    if exact_distribution and 0 < options.top_k <= MAX_TOP_LOGPROBS:
        return "rejection"
    return "sample-match"


class PromptPrefixValidator:
    def __init__(self, server: Target, model: str):
        self.server, self.model = server, model

    async def verify(self, context: str, draft: Draft, options: SamplingOptions, method: Method,
                     rng: np.random.Generator, sent: dict[str, Any] | None = None,
                     format: AnswerFormat | None = None) -> Verdict:
        """`options`: how the target samples (the model's parameters and the client's options merged);
        `sent`: the client's own options, which every request carries, so that upstream merges them
        with the model's parameters as for a direct request and never reloads for a num_ctx of ours;
        `format`: the answer's grammar, which the target applies at every position (in process)."""
        prompts = node_prompts(context, draft)
        sent = {key: value for key, value in (sent or {}).items() if key != "seed"}
        base: dict[str, Any] = {**sent, "temperature": 0}
        top = 0
        seeds: list[int | None] = [None] * len(prompts)
        if method == "sample-match":  # upstream's own sampler, with the model's parameters as merged there
            base = sent
            seeds = [int(s) for s in rng.integers(0, 2**31 - 1, size=len(prompts))]
        elif method == "rejection":
            top = MAX_TOP_LOGPROBS
        steps = await self.server.next_tokens(
            self.model, prompts, [base if seed is None else {**base, "seed": seed} for seed in seeds], top, format)
        if method == "rejection":
            assert not draft.branches, "rejection sampling verifies chains (see above)"
            verdict = self._rejection(steps, draft, options, rng)
        else:
            verdict = self._match(steps, draft, seeds)
        verdict.prompt_tokens = steps[0].prompt_tokens
        return verdict

    @staticmethod
    def _match(steps: list[Step], draft: Draft, seeds: list[int | None]) -> Verdict:
        """Greedy and sample-match, for a chain or a tree: the path the target's own tokens follow."""
        verdict = Verdict()
        pieces, rows = draft.pieces, list(range(len(draft) + 1))  # the path, and its positions' steps
        position = 0
        while position < len(rows):
            step = steps[rows[position]]
            if step.token is None:
                verdict.ended = step.done_reason == "stop"
                break
            if not step.token.complete:
                verdict.resume_seed = seeds[rows[position]]
                break  # part of a character: standard generation takes over from here
            text = step.token.text
            if position < len(pieces) and text != pieces[position] and verdict.branch is None:
                # The main chain misses here: a branch that begins with the target's token is followed.
                # Its positions were asked in their own requests (`node_prompts`), each with its own seed.
                for number, start in branch_rows(draft):
                    branch = draft.branches[number]
                    if branch.at == position and branch.draft.pieces[0] == text:
                        verdict.branch, pieces = number, draft.path(number)
                        rows = rows[: position + 1] + list(range(start, start + len(branch.draft)))
                        break
            if position < len(pieces) and text == pieces[position]:
                verdict.pieces.append((text, "draft"))
                verdict.accepted += 1
                position += 1
                continue
            verdict.pieces.append((text, "correction" if position < len(pieces) else "bonus"))
            break
        return verdict

    @staticmethod
    def _rejection(steps: list[Step], draft: Draft, options: SamplingOptions, rng: np.random.Generator) -> Verdict:
        verdict = Verdict()
        for position, step in enumerate(steps):
            if step.token is None and step.done_reason != "stop":
                break
            p = text_distribution(step.token.top if step.token else {END: 0.0}, options)
            origin: Origin
            if position < len(draft):
                x = draft.pieces[position]
                q = text_distribution(draft.top_logprobs[position], options_for_draft(options, draft, position))
                if q.get(x, 0.0) > 0 and rng.random() < min(1.0, p.get(x, 0.0) / q[x]):
                    verdict.pieces.append((x, "draft"))
                    verdict.accepted += 1
                    continue
                residual = {t: max(0.0, p[t] - q.get(t, 0.0)) for t in p}
                if sum(residual.values()) <= 0:
                    residual = p
                origin = "correction"
            else:
                residual, origin = p, "bonus"
            choice = _draw(residual, rng)
            if choice == END:
                verdict.ended = True
            elif "\ufffd" not in choice:
                verdict.pieces.append((choice, origin))
            # else: only part of a character; standard generation draws that position again, a tiny
            # bias towards whole characters in this rare case (a prompt cannot end inside one).
            break
        return verdict


def node_prompts(context: str, draft: Draft) -> list[str]:
    """A request's prompt per position to verify: the context and each prefix of the main chain, then
    for each branch the context, the main chain up to it and each prefix of the branch's pieces but
    (the position of its first piece is the main chain's, already asked). The target's token at a node is
    what it writes after that prefix, so one request per node verifies a tree over any Ollama."""
    prompts = [context + "".join(draft.pieces[:i]) for i in range(len(draft) + 1)]
    for branch in draft.branches:
        trunk = context + "".join(draft.pieces[: branch.at])
        prompts += [trunk + "".join(branch.draft.pieces[:i]) for i in range(1, len(branch.draft) + 1)]
    return prompts


def branch_rows(draft: Draft) -> list[tuple[int, int]]:
    """(branch number, the index in `node_prompts` of the position after its first piece)."""
    rows, start = [], len(draft) + 1
    for number, branch in enumerate(draft.branches):
        rows.append((number, start))
        start += len(branch.draft)
    return rows


def options_for_draft(options: SamplingOptions, draft: Draft, position: int) -> SamplingOptions:
    """The draft samples with the target's options, limited to the candidates it reported."""
    return SamplingOptions(options.temperature, min(options.top_k, len(draft.top_logprobs[position])) or 1,
                           options.top_p, options.min_p)


def _draw(probs: dict[str, float], rng: np.random.Generator) -> str:
    texts = list(probs)
    weights = np.array([probs[t] for t in texts], dtype=np.float64)
    weights /= weights.sum()
    return texts[int(rng.choice(len(texts), p=weights))]
