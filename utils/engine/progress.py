"""One answer's state as the decoding loop (decoder.py) goes: what it was asked, its plan, drafter and
controller, its output and statistics so far."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from utils.engine.controller import DraftLengthController
from utils.engine.drafters import Draft, Drafter
from utils.engine.events import TextEvent
from utils.engine.output import Output
from utils.engine.planning import Plan
from utils.engine.request import GenerationRequest
from utils.engine.stats import AnswerStats
from utils.engine.target import AnswerFormat
from utils.sampling import GREEDY, SamplingOptions

RECENT_TOKENS = 16  # the last tokens an answer keeps, to measure what verifying costs (_measure_verification)
# An answer's trust in its drafts starts as if this many pieces had survived as expected: two misses
# that were each expected at 0.95 about halve it (a chat's first two drafts from other answers' copies).
TRUST_PRIOR = 2.0
# What an answer's verifications may lose, at most, against standard generation: this share of its
# time so far, or, early in the answer, what FREE_MISSES missed one-piece drafts lose. Drafts whose
# expected gain was positive still missed often enough that 5 to 8 of 24 answers that copy nothing
# ran 3-5% slower than the same server's standard answers (on this CPU, in process, a one-piece
# draft gains 19 ms where it survives and loses 12 where it misses).
LOSS_BUDGET = 0.015
FREE_MISSES = 2
# A draft whose first piece survives at least this often, as the controller reckons it, is verified
# whatever the budget: the copies of earlier turns that a conversation's later turns are made of. At
# 0.75 a one-piece draft gains 11 ms on average here; held to the budget, later turns lost their
# copies after a few early misses (suffix 1.35x to 1.23x, lookup 1.29x to 1.05x on turn 4). Only once
# one of this answer's own draft pieces has survived: an answer's first drafts are bets on what other
# answers taught, and a first draft of three that missed cost a 37-token summary 3% (summary-02).
SURE = 0.75


@dataclass
class AnswerState:
    """The state of one answer as the loop goes."""

    request: GenerationRequest
    plan: Plan
    prompt: str
    drafter: Drafter | None  # None once speculation has failed for this answer
    controller: DraftLengthController
    stats: AnswerStats
    output: Output
    rng: np.random.Generator
    started: float = field(default_factory=time.perf_counter)
    context_limit: int | None = None  # the context the target is loaded with, where the server says
    context_tokens: int = 0  # the target's token count for the prompt, as its last answer reported
    short_segment: bool = False  # the last round emitted nothing: generate a few tokens normally
    first_token: bool = False  # the first segment gives one token, then the controller's K is verified
    after_segment: bool = False  # the last step was a standard segment (its stream closed mid-token)
    empty_drafts: int = 0  # empty drafts in a row
    resume_seed: int | None = None  # sample-match: draw the next standard token with this seed
    drafter_saw: int | None = None  # output tokens in the drafter's last context (None: it saw nothing yet)
    unverified: tuple[int, Draft] | None = None  # a draft not worth verifying, and where it was proposed
    proposal: Draft | None = None  # a free drafter's draft for the context as it is, to verify next
    expected_survivals: float = 0.0  # of this answer's decided draft pieces, what the controller expected ...
    survivals: int = 0  # ... and how many survived, verified or held against the target's text
    gained: float = 0.0  # seconds this answer's rounds saved against standard tokens (below 0: lost)
    # The texts of the last tokens of standard segments.
    recent: deque[str] = field(default_factory=lambda: deque(maxlen=RECENT_TOKENS))

    @property
    def context(self) -> str:
        return self.prompt + self.output.generated

    @property
    def format(self) -> AnswerFormat | None:
        """The request's `format` as the target resumes it: it constrains the text after the prompt."""
        return None if self.request.format is None else AnswerFormat(self.request.format, len(self.prompt))

    def note_prompt_tokens(self, count: int) -> None:
        """The server's token count of the prompt alone, from the first answer that reports one."""
        if not self.stats.prompt_tokens and count > 0:
            self.stats.prompt_tokens = count

    def grade_unverified(self, ended: bool = False) -> None:
        """Hold the draft that was not worth verifying (`unverified`) against what the target wrote after
        it, and teach the controller what its confidences were worth (`Draft.graded`): once the target
        has written past it or contradicted it, or, when its standard segment has `ended`, as far as
        the target got."""
        if self.unverified is None:
            return
        at, draft = self.unverified
        accepted, decided = draft.graded(self.output.generated[at:])
        if ended or decided > accepted or accepted == len(draft):
            self.tally(draft.confidence, accepted, decided, draft.source)
            self.controller.observe_confidence(draft.confidence, accepted, decided, draft.source)
            self.unverified = None

    def tally(self, confidence: list[float], accepted: int, decided: int, source: str = "") -> None:
        """What the first `decided` pieces of a draft turned out to be (`accepted` of them survived),
        for `trust`; before the controller learns from them."""
        self.expected_survivals += self.controller.predicted(confidence, decided, source)
        self.survivals += accepted

    def trust(self) -> float:
        """This answer's drafts' survivals over what was expected of them, from TRUST_PRIOR pieces
        that met it: below 1 where the prompt copies less than the answers the controller learned
        from, above where it copies more."""
        return (self.survivals + TRUST_PRIOR) / (self.expected_survivals + TRUST_PRIOR)

    def asks_every_token(self) -> bool:
        """Whether the drafter is asked after every standard token: a free one (a proposal costs
        microseconds) choosing its own lengths, once the standard speed it must beat is known."""
        controller = self.controller
        return (self.drafter is not None and self.drafter.free and controller.fixed_k is None
                and self.plan.method is not None and controller.standard_seconds_per_token is not None)

    def settle(self, emitted: int, seconds: float) -> None:
        """A verification round took `seconds` and gave `emitted` tokens: what it gained or lost."""
        if (standard := self.controller.standard_seconds_per_token) is not None:
            self.gained += emitted * standard - seconds

    def affordable(self, leaving_segment: bool = False) -> int:
        """The longest draft this answer can verify and stay within its loss budget if every piece
        misses (one token for the round's time; `leaving_segment`: with the closed stream's token
        waited for too, as `cut` charges it). A fixed K is verified whatever it costs."""
        controller = self.controller
        standard, length = controller.standard_seconds_per_token, controller.k_max
        if standard is None or controller.fixed_k is not None:
            return length
        wait = standard if leaving_segment else 0.0

        def loss(pieces: int) -> float:  # what a round of so many pieces loses if the first misses
            return controller.round_seconds(pieces) + wait - standard

        allowed = max(LOSS_BUDGET * (time.perf_counter() - self.started), FREE_MISSES * loss(1))
        while length and self.gained - loss(length) < -allowed - 1e-9:  # rounding: the same loss affords
            length -= 1
        return length

    def verifiable(self, draft: Draft, leaving_segment: bool = False) -> int:
        """How many of `draft`'s pieces may be verified: all where its first piece is sure (`SURE`) and
        this answer has seen a piece of its own drafts survive, else what the loss budget affords."""
        if (draft.confidence and self.survivals
                and self.controller.survival(draft.confidence[0], self.trust(), draft.source) >= SURE):
            return len(draft)
        return self.affordable(leaving_segment)

    def worth_verifying(self, draft: Draft, waits: bool, leaving_segment: bool = False) -> int:
        """How many of `draft`'s pieces (each with a confidence) to verify: the controller's `cut`,
        with this answer's trust, of what the loss budget lets be verified. `waits`: the round would
        wait for a closed stream's token, a loss the budget counts; `leaving_segment`: `cut` charges
        that wait too (once, where a standard segment is left for the draft)."""
        allowed = draft.confidence[: self.verifiable(draft, waits)]
        return self.controller.cut(allowed, leaving_segment=leaving_segment, trust=self.trust(), source=draft.source)

    def draft_options(self) -> SamplingOptions:
        """Greedy and sample-match draft the most likely pieces; rejection sampling must draw them."""
        if self.plan.method != "rejection":
            return GREEDY
        options = self.plan.sampling
        return SamplingOptions(options.temperature, options.top_k, options.top_p, options.min_p,
                               seed=int(self.rng.integers(0, 2**31 - 1)))

    def emitted(self, events: list[TextEvent]) -> list[TextEvent]:
        if events and self.stats.time_to_first_token_s is None:
            self.stats.time_to_first_token_s = time.perf_counter() - self.started
        return events
