"""An answer's loss budget: what its verifications may lose against standard generation, so that drafts
that keep missing cannot make one answer much slower than standard, and the trust it has earned in
its own drafts, which scales what the controller expects of them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from utils.engine.controller import DraftLengthController
from utils.engine.drafters import Draft

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
class LossBudget:
    """One answer's budget, against its controller's costs (`started`: when the answer began)."""

    controller: DraftLengthController
    started: float = field(default_factory=time.perf_counter)
    gained: float = 0.0  # seconds this answer's rounds saved against standard tokens (below 0: lost)
    expected_survivals: float = 0.0  # of this answer's decided draft pieces, what the controller expected ...
    survivals: int = 0  # ... and how many survived, verified or held against the target's text

    def settle(self, emitted: int, seconds: float) -> None:
        """A verification round took `seconds` and gave `emitted` tokens: what it gained or lost."""
        if (standard := self.controller.cost.standard_seconds_per_token) is not None:
            self.gained += emitted * standard - seconds

    def tally(self, confidence: list[float], accepted: int, decided: int, source: str = "") -> None:
        """What the first `decided` pieces of a draft turned out to be (`accepted` of them survived),
        for `trust`; before the controller learns from them."""
        self.expected_survivals += self.controller.calibration.predicted(confidence, decided, source)
        self.survivals += accepted

    def trust(self) -> float:
        """This answer's drafts' survivals over what was expected of them, from TRUST_PRIOR pieces
        that met it: below 1 where the prompt copies less than the answers the controller learned
        from, above where it copies more."""
        return (self.survivals + TRUST_PRIOR) / (self.expected_survivals + TRUST_PRIOR)

    def affordable(self, waits_for_closed_token: bool = False) -> int:
        """The longest draft this answer can verify and stay within its budget if every piece misses
        (one token for the round's time; `waits_for_closed_token`: with that wait too, a loss whatever
        the draft). A policy not held to the budget (a fixed K) verifies what it asks for."""
        controller = self.controller
        cost, length = controller.cost, controller.k_max
        if (standard := cost.standard_seconds_per_token) is None or not controller.held_to_budget:
            return length
        wait = cost.closed_token_wait(waits_for_closed_token)

        def loss(pieces: int) -> float:  # what a round of so many pieces loses if the first misses
            return cost.round_seconds(pieces) + wait - standard

        allowed = max(LOSS_BUDGET * (time.perf_counter() - self.started), FREE_MISSES * loss(1))
        while length and self.gained - loss(length) < -allowed - 1e-9:  # rounding: the same loss affords
            length -= 1
        return length

    def verifiable(self, draft: Draft, waits_for_closed_token: bool = False) -> int:
        """How many of `draft`'s pieces may be verified: all where its first piece is sure (`SURE`) and
        this answer has seen a piece of its own drafts survive, else what the budget affords."""
        if (draft.confidence and self.survivals
                and self.controller.survival(draft.confidence[0], self.trust(), draft.source) >= SURE):
            return len(draft)
        return self.affordable(waits_for_closed_token)

    def worth_verifying(self, draft: Draft, waits_for_closed_token: bool, leaves_segment: bool = False) -> int:
        """How many of `draft`'s pieces (each with a confidence) to verify: the controller's `cut`, with
        this answer's trust, of what the budget lets be verified. `leaves_segment`: the draft would
        end a standard segment, so `cut` charges the closed stream's wait to it (a round right after
        a segment was already charged it when the segment was left)."""
        allowed = draft.confidence[: self.verifiable(draft, waits_for_closed_token)]
        return self.controller.cut(allowed, waits_for_closed_token=leaves_segment and waits_for_closed_token,
                                   trust=self.trust(), source=draft.source)
