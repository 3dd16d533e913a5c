"""How long the next draft is, how much of a draft to verify, and whether an answer speculates at all.

A controller is what answers verified one way on one server taught (a `CostModel`, a `Calibration`)
and a draft-length policy that reads it, one class each (vLLM's `DraftLengthPolicy` pattern):
- `FixedK`: K pieces every round, verified whole whatever they cost (`--k`, `X-Speculation-K`);
- `Adaptive`: a draft model's. Speculating with K costs D(K) + V(K) and yields E(K) = 1 + a1 +
  a1*a2 + ... tokens; standard generation one token per S seconds. It picks the K with the best
  expected tokens per second, K = 0 when none pays; the loop then generates normally and probes
  now and then (`probing`), less often after each probe that did not pay;
- `FreeDrafts`: a drafter that costs microseconds (Drafter.free) is asked after every standard
  token, for the longest draft; `cut` verifies what pays, so a turn that copies an earlier answer is
  verified where it copies and nowhere else. It never probes: what `cut` leaves out is still learned,
  from the text the target writes next.

A draft whose pieces carry the drafter's confidence is cut to the length that pays (`cut`): each
piece survives as often as pieces as confident did here (calibration.py). Where probes keep not
paying (SKIP_AFTER), or verifying was measured to cost so much that no K could pay even with every
draft accepted (a server that evaluates a validator's requests one at a time), whole answers go
standard (`skips`): one request, nothing in between to slow it. Now and then an answer speculates
anyway, since the server or the prompts may have changed: the 8th skipped answer, then, while those
retries keep not paying, the 16th, 32nd, up to the 64th.

Long bursts for sure copies: a draft is verified up to CHAIN_K pieces (or k_max, if less) as above;
past that, up to k_max, only while each further piece survives at least LONG_SURE of the time, as
the controller has calibrated such pieces, and only where it has measured what verifying costs (the
cost model's per-row cost, extrapolated past the longest burst measured): an agent rewriting a file
it read re-emits long runs that a free drafter finds with certainty, where each row more in a burst
costs a fraction of a standard token. A draft model's K stays within CHAIN_K: it is chosen before
the draft's confidences are known.

`waits_for_closed_token`: over HTTP a round right after a standard segment also waits for the token
the closed stream was computing (cost_model.py). It is charged once, where a standard segment is
left for a draft, not on every round of a run, which would keep drafts that pay from being verified.

Load (`seen`): the costs a decision reads are those measured at the load it is made under, the other
answers in progress on the same model (`LoadLevels`), since a burst's rows share each decode with
their tokens: one cost model per load, each learned from its own rounds and standard segments, and
each round charged what it delays the others (cost_model.py). Where bursts cost more than they save
at the current concurrency no K pays, and answers go standard as above; at a load where they pay,
drafts stay. Measured per load, not a fixed batch-size switch. What drafts are worth (calibration)
does not depend on the load and is shared.
"""

from __future__ import annotations

from typing import ClassVar

from utils.engine.calibration import Calibration
from utils.engine.cost_model import CostModel
from utils.engine.tree_policy import Chains

PROBE_EVERY = 4  # standard segments between two speculative probes while K = 0 ...
MAX_PROBE_EVERY = 64  # ... doubled after each probe that did not pay, up to this
SEGMENT_TOKENS = 16  # a standard segment between two decisions while K = 0 ...
MAX_SEGMENT_TOKENS = 128  # ... longer while probes keep failing: each segment is a new request
MARGIN = 1.02  # speculation must beat standard by this factor: noise should not tip it
SKIP_AFTER = 4  # probes in a row that did not pay, after which whole answers go standard ...
RETRY_ANSWERS = 8  # ... but for one answer in this many, which speculates anyway ...
MAX_RETRY_ANSWERS = 64  # ... doubled after each retry that did not pay, up to this
CHAIN_K = 8  # the longest draft verified but for a sure copy (k_max's default before long bursts)
# A piece past CHAIN_K is verified only where pieces as confident survived at least this often here;
# `cut` then weighs what it is expected to give against what its row costs. A bar, not the rate alone:
# past 8 pieces the expected gain of one more is small and its estimate, the product of 9 or more
# survivals, is only as good as the calibration, so only pieces it is sure of are bet on.
LONG_SURE = 0.9
MAX_LOAD = 7  # loads above this many other answers are measured and charged as this many


class LoadLevels:
    """Which cost model a decision reads under a load; as it stands, one whatever the load (the
    costs' running averages drift with it). `ByLoad` keeps one per load."""

    def level(self, others: int) -> int:
        return 0


class ByLoad(LoadLevels):
    """One cost model per number of other answers in progress (up to MAX_LOAD)."""

    def level(self, others: int) -> int:
        return max(0, min(others, MAX_LOAD))


class DraftLengthController:
    """The interface every policy implements, and the learning they share. As it stands it is no
    policy at all (nothing drafted); the three below are."""

    held_to_budget: ClassVar[bool] = True  # an answer's loss budget limits its drafts (budget.py)
    first_token_standard: ClassVar[bool] = True  # the first token as fast as standard generation

    def __init__(self, k_max: int, load: LoadLevels | None = None):
        self.k_max = k_max
        self.load = load or LoadLevels()
        self.costs = {0: CostModel()}  # by load level (`seen`)
        self.current = 0
        self.calibration = Calibration(k_max)
        self.trees = Chains()  # which branches of a draft are verified (tree_policy.py): none by default

    @property
    def cost(self) -> CostModel:
        """What drafting, verifying and a standard token cost at the load last `seen`."""
        return self.costs[self.current]

    def seen(self, others: int) -> None:
        """The other answers in progress on the model now: the decisions and measurements that follow
        are this load's, until the next `seen`."""
        self.current = self.load.level(others)
        if self.current not in self.costs:
            self.costs[self.current] = CostModel(others=self.current)

    # -- decisions -----------------------------------------------------------------------------

    def choose(self, limit: int | None = None) -> int:
        """K for the next round; `limit` caps it (tokens left, room left, what the budget affords)."""
        return 0

    def cut(self, confidence: list[float], waits_for_closed_token: bool = False, trust: float = 1.0,
            source: str = "") -> int:
        """How many pieces of a draft with these confidences to verify."""
        return len(confidence)

    def probing(self) -> bool:
        """Whether the next round is verified whole although it may not pay, to learn."""
        return False

    def skips(self, waits_for_closed_token: bool = False) -> bool:
        """Whether the next answer goes standard from start to end: a question, nothing changes."""
        return False

    def start_answer(self, waits_for_closed_token: bool = False, copies: bool = False) -> bool:
        """An answer begins: True when it goes standard from start to end (`skips`), which is counted.
        `copies`: its drafter finds that it would copy from its context (Drafter.copies), so a policy
        that set speculation aside tries it again for this answer (ask only where `skips`)."""
        return False

    def asks_every_token(self) -> bool:
        """Whether the drafter is asked after every standard token (FreeDrafts)."""
        return False

    def segment_tokens(self) -> int:
        """Tokens of the next standard segment between two decisions."""
        return SEGMENT_TOKENS

    @property
    def chain(self) -> int:
        """The longest draft verified but for a sure copy (CHAIN_K, or k_max where it is less)."""
        return min(self.k_max, CHAIN_K)

    @property
    def longest(self) -> int:
        """The longest draft this policy verifies but for a sure copy: where what verifying costs is
        measured when drafts keep coming back empty."""
        return self.chain

    def _cap(self, limit: int | None) -> int:
        return self.k_max if limit is None else max(0, min(self.k_max, limit))

    def speculative_rate(self, k: int) -> float:
        return self.calibration.expected_tokens(k) / max(self.cost.round_seconds(k), 1e-6)

    def survival(self, confidence: float, trust: float = 1.0, source: str = "") -> float:
        return self.calibration.survival(confidence, trust, source)

    # -- learning ------------------------------------------------------------------------------

    def record_round(self, k: int, drafted: int, accepted: int, draft_seconds: float, verify_seconds: float,
                     unseen: int = 0, confidence: list[float] | None = None, waited_for_closed_token: bool = False,
                     source: str = "", tree: bool = False) -> None:
        """One round: `unseen` is how many tokens the drafter had not seen before drafting (in a run of
        rounds, the previous round's emitted tokens; after a standard segment, the whole segment);
        `confidence`, the drafter's estimate for each piece verified. For a `tree` (branches verified
        too: the tree policy learns their cost), `drafted` and `accepted` are its main chain's, and
        its time teaches the cost of verifying a chain nothing."""
        draft_seconds = self.cost.record_round(drafted, draft_seconds, verify_seconds, unseen, waited_for_closed_token,
                                               learn_verify=not tree)
        if (standard := self.cost.standard_seconds_per_token) is not None:
            rate = (accepted + 1) / max(draft_seconds + verify_seconds, 1e-6)
            self._judge_round(drafted, paid=drafted > 0 and rate * standard > MARGIN)
        self.calibration.observe_positions(k, drafted, accepted)
        self.calibration.observe_confidence(confidence or [], accepted, min(accepted + 1, drafted), source)
        self._after_round()

    def _judge_round(self, drafted: int, paid: bool) -> None:
        """Whether a round paid, once the standard speed is known (what the adaptive policies learn)."""

    def _after_round(self) -> None:
        """Any round, known speed or not."""

    def record_standard(self, tokens: int, seconds: float) -> None:
        """A standard segment: `seconds` between its first and last token, for `tokens` - 1 steps."""
        self.cost.record_standard(tokens, seconds)

    def record_verification(self, k: int, seconds: float) -> None:
        """What verifying `k` tokens cost, measured apart from a round (nothing was drafted)."""
        self.cost.record_verification(k, seconds)


class FixedK(DraftLengthController):
    """K pieces a round (up to k_max), verified whole from the first token, whatever they cost."""

    held_to_budget = False
    first_token_standard = False

    def __init__(self, k_max: int, k: int):
        super().__init__(k_max)  # verified whatever it costs: one cost model is enough
        self.k = k

    def choose(self, limit: int | None = None) -> int:
        return min(self.k, self._cap(limit))

    def segment_tokens(self) -> int:
        return MAX_SEGMENT_TOKENS  # only after empty drafts, where the loop's doubling decides

    @property
    def longest(self) -> int:
        return min(self.k, self.k_max)


class Adaptive(DraftLengthController):
    """A draft model's: the K with the best expected tokens per second, probes where none pays, and
    whole answers standard where probes keep not paying (the module's docstring)."""

    def __init__(self, k_max: int, load: LoadLevels | None = None):
        super().__init__(k_max, load or ByLoad())
        self.standard_streak = 0  # standard segments since the last round
        self.probe_every = PROBE_EVERY
        self.failed_probes = 0  # rounds in a row that drafted something and did not pay
        self.skipped = 0  # answers in a row that went standard because speculation could not pay
        self.retry_every = RETRY_ANSWERS  # the answer that speculates again after so many (skips)

    def choose(self, limit: int | None = None) -> int:
        cap = min(self._cap(limit), self.chain)  # a draft model's K: chosen before its confidences are known
        standard = self.cost.standard_seconds_per_token
        if cap == 0 or standard is None:  # measure standard speed first: the answer starts as fast
            return 0
        best = max(range(1, cap + 1), key=self.speculative_rate)
        pays = self.speculative_rate(best) > MARGIN / standard
        return best if pays or self.probing() else 0

    def cut(self, confidence: list[float], waits_for_closed_token: bool = False, trust: float = 1.0,
            source: str = "") -> int:
        """The length with the best expected tokens per second; 0 where none beats standard generation;
        all of it (up to `chain`) before the standard speed is known. `trust`: what this answer's own drafts proved
        worth against what was expected of them (LossBudget.trust), which scales each piece's chance:
        the bins learn from every answer, and a chat after many edits would be verified as if it
        copied too. `waits_for_closed_token`: the draft would end a standard segment (charged here).
        Past `chain` pieces only a sure copy goes on (`_long`)."""
        if (standard := self.cost.standard_seconds_per_token) is None:
            return min(len(confidence), self.chain)
        wait = self.cost.closed_token_wait(waits_for_closed_token)
        expected, reach, best, best_rate = 1.0, 1.0, 0, 0.0
        for length, value in enumerate(confidence[: self.k_max], 1):
            survival = self.survival(value, trust, source)
            if length > self.chain and not self._long(value, trust, source):
                break
            reach *= survival
            expected += reach
            rate = expected / max(self.cost.round_seconds(length) + wait, 1e-6)
            if rate > best_rate:
                best, best_rate = length, rate
        return best if best_rate * standard > MARGIN else 0

    def _long(self, confidence: float, trust: float, source: str) -> bool:
        """Whether a piece past `chain` may be verified: pieces as confident survived LONG_SURE of the
        time here, by the bins alone (an answer's `trust` may lower that, never raise it: a few early
        survivals raise it above 1, and unsure pieces were verified 16 at a time, 0.7 accepted), and
        what verifying costs has been measured, not the prior (which has every long burst look cheap)."""
        return self.survival(confidence, min(trust, 1.0), source) >= LONG_SURE and bool(self.cost.verify_seconds)

    def probing(self) -> bool:
        return self.standard_streak >= self.probe_every

    def can_pay(self, waits_for_closed_token: bool = False) -> bool:
        """Whether some draft length beats standard generation if every drafted token is accepted
        (K + 1 tokens a round); True until a verification has been measured. A draft model's rounds
        come in runs, so the closed stream's wait is not charged here (FreeDrafts charges it)."""
        return self._can_pay(0.0)

    def _can_pay(self, wait: float) -> bool:
        cost = self.cost
        if not cost.verify_seconds or cost.standard_seconds_per_token is None:
            return True
        best = max((k + 1) / max(cost.round_seconds(k) + wait, 1e-6) for k in range(1, max(self.chain, 1) + 1))
        return best * cost.standard_seconds_per_token > MARGIN

    def may_speculate(self, waits_for_closed_token: bool = False) -> bool:
        return self.can_pay(waits_for_closed_token) and self.failed_probes < SKIP_AFTER

    def skips(self, waits_for_closed_token: bool = False) -> bool:
        return not self.may_speculate(waits_for_closed_token) and self.skipped + 1 < self.retry_every

    def start_answer(self, waits_for_closed_token: bool = False, copies: bool = False) -> bool:
        """Where speculation has not paid but enough answers went standard, this one retries: it forgets
        what verifying cost and probes as often as at first; one more probe that does not pay, and
        answers go standard again, for twice as long (a probe that pays brings the retries back to
        RETRY_ANSWERS, in `_judge_round`).

        An answer that `copies` (its drafter would copy long runs of its context: the question that
        wrote a draft model off after one cold start may be the one that copies a whole function)
        retries at once, the same way, but leaves the count of skipped answers and their schedule as
        they were: that it copies is no sign that the server has changed."""
        skips = self.skips(waits_for_closed_token)
        if skips and not copies:
            self.skipped += 1
            return True
        if not self.may_speculate(waits_for_closed_token):
            if not skips:  # the retry that was due
                self.skipped = 0
                self.retry_every = min(2 * self.retry_every, MAX_RETRY_ANSWERS)
            self.probe_every = PROBE_EVERY
            self.cost.forget_verifications()
            self.failed_probes = SKIP_AFTER - 1
        return False

    def segment_tokens(self) -> int:
        """Each segment is a new request that re-reads the last context token, so segments grow as
        speculation keeps not paying."""
        return min(SEGMENT_TOKENS * self.probe_every // PROBE_EVERY, MAX_SEGMENT_TOKENS)

    def _judge_round(self, drafted: int, paid: bool) -> None:
        # A probe costs more than a standard step (the draft reads the whole context first): when one
        # does not pay, wait twice as long for the next. An empty draft never pays: nothing was
        # verified, and the standard segment that follows it is one more request.
        self.probe_every = PROBE_EVERY if paid else min(2 * self.probe_every, MAX_PROBE_EVERY)
        if drafted:  # an empty draft says nothing of the server, and a free drafter's costs nothing
            self.failed_probes = 0 if paid else self.failed_probes + 1
            if paid:
                self.retry_every = RETRY_ANSWERS

    def _after_round(self) -> None:
        self.standard_streak = 0

    def record_standard(self, tokens: int, seconds: float) -> None:
        self.standard_streak += 1
        super().record_standard(tokens, seconds)


class FreeDrafts(Adaptive):
    """A free drafter's: asked after every standard token once the standard speed is known, for the
    longest draft, which `cut` then verifies as far as it pays; never probes; whole answers go
    standard only where no verification can pay (drafts that missed cost their verification, and
    `cut` already keeps the confidences that missed from being verified)."""

    def choose(self, limit: int | None = None) -> int:
        cap = self._cap(limit)
        return 0 if cap == 0 or self.cost.standard_seconds_per_token is None else cap

    def probing(self) -> bool:
        return False

    def asks_every_token(self) -> bool:
        return self.cost.standard_seconds_per_token is not None

    def can_pay(self, waits_for_closed_token: bool = False) -> bool:
        """As for a draft model, but each of its drafts comes where the text copies, after a standard
        segment, and a run of rounds only begins with one: where even that cannot pay, `cut` would
        verify nothing all answer long."""
        return self._can_pay(self.cost.closed_token_wait(waits_for_closed_token))

    def may_speculate(self, waits_for_closed_token: bool = False) -> bool:
        return self.can_pay(waits_for_closed_token)


def new_controller(k_max: int, fixed_k: int | None, free: bool) -> DraftLengthController:
    """The policy for answers with a fixed K, a free drafter or a draft model."""
    if fixed_k is not None:
        return FixedK(k_max, fixed_k)
    return FreeDrafts(k_max) if free else Adaptive(k_max)
