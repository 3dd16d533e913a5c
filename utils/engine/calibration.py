"""What drafted pieces turned out to be worth on one server, learned live (controller.py reads it).

Two views of the same verifications: by position (the chance that piece i survives once the ones
before it did, for drafters whose pieces carry no confidence) and by the drafter's confidence in a
piece (a draft model's probability, a suffix tree's count ratio, a lookup's match length), in bins
of 0.1, starting from what the drafter says. A drafter with several sources (Draft.source) has bins
per source: at the same confidence, the suffix drafter's pieces from earlier answers survived about
half as often as those from the answer's own text (0.31 against 0.60 in bin 0.3, 0.19 against 0.31
in bin 0.2: 24 single prompts here).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from utils.engine.cost_model import blend

CONFIDENCE_BINS = 10  # a drafter's confidence is calibrated in this many bins of [0, 1]
FIRST_ACCEPTANCE = 0.6  # each position's chance before anything was verified


def _prior_bins() -> list[float]:
    return [(b + 0.5) / CONFIDENCE_BINS for b in range(CONFIDENCE_BINS)]


def _bin(confidence: float) -> int:
    return min(max(int(confidence * CONFIDENCE_BINS), 0), CONFIDENCE_BINS - 1)


@dataclass
class Calibration:
    """P(position i accepted | i-1 accepted), and P(a piece survives | the drafter's confidence)."""

    positions: int
    acceptance: list[float] = field(default_factory=list)
    by_confidence: list[float] = field(default_factory=_prior_bins)  # a drafter's only source
    by_source: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.acceptance:
            self.acceptance = [FIRST_ACCEPTANCE] * max(self.positions, 1)

    def expected_tokens(self, k: int) -> float:
        """Tokens a round of `k` pieces gives: 1 + a1 + a1*a2 + ... (the target's own token after them)."""
        expected, reach = 1.0, 1.0
        for alpha in self.acceptance[:k]:
            reach *= alpha
            expected += reach
        return expected

    def bins(self, source: str = "") -> list[float]:
        """What pieces from `source` proved worth, by confidence bin ("": a drafter's only source)."""
        return self.by_source.setdefault(source, _prior_bins()) if source else self.by_confidence

    def survival(self, confidence: float, trust: float = 1.0, source: str = "") -> float:
        """The chance that a piece this confident survives, scaled by an answer's `trust` (budget.py)."""
        return min(self.bins(source)[_bin(confidence)] * trust, 1.0)

    def predicted(self, confidence: list[float], decided: int, source: str = "") -> float:
        """How many of the first `decided` pieces of a draft were expected to survive, as it stands now."""
        bins = self.bins(source)
        return sum(bins[_bin(value)] for value in confidence[:decided])

    def observe_positions(self, k: int, drafted: int, accepted: int) -> None:
        """A verification: the first `accepted` of `drafted` pieces survived (K asked for)."""
        for position in range(min(accepted + 1, drafted)):
            self.acceptance[position] = blend(self.acceptance[position], 1.0 if position < accepted else 0.0)
        if drafted < k and drafted < len(self.acceptance):
            # The drafter stopped early (p_min): the positions after it would likely fail too.
            self.acceptance[drafted] = blend(self.acceptance[drafted], 0.0)

    def observe_confidence(self, confidence: list[float], accepted: int, decided: int, source: str = "") -> None:
        """What the first `decided` pieces of a draft turned out to be (the first `accepted` accepted,
        then one rejected if decided > accepted), by the drafter's confidence in each: from a
        verification, or from a draft that was not verified, held against the text the target then
        wrote (AnswerState.grade_unverified), so that confidences not worth verifying yet are still
        learned. `source`: where the draft was found."""
        bins = self.bins(source)
        for position in range(min(decided, len(confidence))):
            index = _bin(confidence[position])
            bins[index] = blend(bins[index], 1.0 if position < accepted else 0.0)
