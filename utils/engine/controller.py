"""Adaptive draft length: pick the K with the best expected tokens per second, K = 0 when none pays.

It learns, live, the acceptance rate at each draft position and what a draft, a verification of K
tokens and a standard token cost on this server. Speculating with K costs D(K) + V(K) and yields
E(K) = 1 + a1 + a1*a2 + ... tokens; standard generation yields one token per S seconds. When no K
beats 1/S the controller chooses 0, the decoding loop then generates normally and probes again
now and then, so a server that serialises requests or a draft that keeps missing costs little.
Where the last SKIP_AFTER probes did not pay, or verifying was measured to cost so much
that no K could pay even with every draft accepted (a server that evaluates a validator's requests
one at a time), whole answers go standard (`skips`): one request, nothing in between to slow it.
Now and then an answer speculates anyway, since the server or the prompts may have changed: the 8th
skipped answer, then, while those retries keep not paying, the 16th, 32nd, up to the 64th, so that
a server where speculation never pays costs little more than going to it directly.

A draft whose pieces carry the drafter's own confidence (a draft model's probability, a suffix
tree's count ratio, a lookup's match length) is cut to the length that pays (`cut`): the chance
that a piece survives is what the controller measured for pieces as confident, in bins of 0.1,
starting from what the drafter says. A free drafter (no model call) is asked at every step, so a
conversation turn that copies an earlier answer is verified where it copies, and nowhere else; its
drafts are never probed (what `cut` leaves out is still learned, from the text the target writes
next) and its answers go standard throughout only where no verification can pay on this server.

A round right after a standard segment also waits for the token the closed stream was computing:
the server had just begun it when the stream was closed, so about one standard token (measured on
this CPU: 74 ms for K = 1 after a segment, a burst alone 43 ms, a standard token 31.5 ms). That wait
is not what a verification costs: it is taken out of what the round teaches (`after_segment`) and
charged once, when a standard segment is left for a draft (`cut(..., leaving_segment=True)`), not
on every round of a run, which would keep drafts that would pay from being verified at all.

What verifying K pieces costs is interpolated between the lengths measured here, from a standard
token's time at K = 0 (a burst is one request more than a step, and each piece one row more), and
extended past the longest by the slope of the last two: measured at K = 8 alone, on this 2-core CPU
a K = 2 verification was 81 ms by this rule and 78 ms measured, where 10% per K gave 196 ms.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SMOOTHING = 0.2  # weight of the newest measurement in the running averages
PROBE_EVERY = 4  # standard segments between two speculative probes while K = 0 ...
MAX_PROBE_EVERY = 64  # ... doubled after each probe that did not pay, up to this
SEGMENT_TOKENS = 16  # a standard segment between two decisions while K = 0 ...
MAX_SEGMENT_TOKENS = 128  # ... longer while probes keep failing: each segment is a new request
MARGIN = 1.02  # speculation must beat standard by this factor: noise should not tip it
SKIP_AFTER = 4  # probes in a row that did not pay, after which whole answers go standard ...
RETRY_ANSWERS = 8  # ... but for one answer in this many, which speculates anyway ...
MAX_RETRY_ANSWERS = 64  # ... doubled after each retry that did not pay, up to this
CONFIDENCE_BINS = 10  # a drafter's confidence is calibrated in this many bins of [0, 1]


def _blend(old: float | None, new: float) -> float:
    return new if old is None else (1 - SMOOTHING) * old + SMOOTHING * new


def _prior_bins() -> list[float]:
    return [(b + 0.5) / CONFIDENCE_BINS for b in range(CONFIDENCE_BINS)]


def _bin(confidence: float) -> int:
    return min(max(int(confidence * CONFIDENCE_BINS), 0), CONFIDENCE_BINS - 1)


@dataclass
class DraftLengthController:
    k_max: int
    fixed_k: int | None = None
    free: bool = False  # the drafter's proposals cost microseconds (Drafter.free): asked at every token
    acceptance: list[float] = field(default_factory=list)  # P(position i accepted | i-1 accepted)
    verify_seconds: dict[int, float] = field(default_factory=dict)  # by K
    # The K measured in a run of rounds: an estimate from a round after a standard segment (what it
    # took less one standard token) no longer moves theirs. Under load that token's share was far
    # less than a standard token (a K = 4 burst on a one-slot server: 54 ms so estimated, 64-76 ms
    # in runs), and the estimate alone would have had drafts verified where no draft could pay.
    verified_in_runs: set[int] = field(default_factory=set)
    draft_seconds_per_token: float | None = None
    # A draft model that has not seen the tokens generated since its last draft reads them first
    # (prefill): charged per unseen token, apart from drafting, so that a probe after a long standard
    # segment is judged by what a round costs in a run of rounds.
    catch_up_seconds_per_token: float | None = None
    standard_seconds_per_token: float | None = None
    standard_streak: int = 0
    probe_every: int = PROBE_EVERY
    failed_probes: int = 0  # rounds in a row that drafted something and did not pay
    skipped: int = 0  # answers in a row that went standard because speculation could not pay
    retry_every: int = RETRY_ANSWERS  # the answer that speculates again after so many (skips)
    # P(a piece is accepted | the ones before it were) by the drafter's confidence in it, by bin:
    # at first what the drafter says (each bin's centre), then what verifications showed. A drafter
    # with several sources (Draft.source) has bins per source: at the same confidence, the suffix
    # drafter's pieces from earlier answers survived about half as often as those from the answer's
    # own text (0.31 against 0.60 in bin 0.3, 0.19 against 0.31 in bin 0.2: 24 single prompts here).
    by_confidence: list[float] = field(default_factory=_prior_bins)
    by_source: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.acceptance:
            self.acceptance = [0.6] * max(self.k_max, 1)

    # -- decisions -----------------------------------------------------------------------------

    def expected_tokens(self, k: int) -> float:
        expected, reach = 1.0, 1.0
        for alpha in self.acceptance[:k]:
            reach *= alpha
            expected += reach
        return expected

    def verify_cost(self, k: int) -> float:
        """Seconds to verify `k` pieces: between the lengths measured here, on the line through their
        neighbours (a standard token's time at K = 0); past the longest, on the last two's."""
        standard = self.standard_seconds_per_token or 0.05
        if not self.verify_seconds:
            return standard * (1 + 0.15 * k)  # optimistic prior: try speculation first
        points = [(0, standard), *sorted(self.verify_seconds.items())]
        right = next((i for i, (known, _) in enumerate(points) if known >= k and i > 0), len(points) - 1)
        (k0, v0), (k1, v1) = points[right - 1], points[right]
        return v1 + max((v1 - v0) / (k1 - k0), 0.0) * (k - k1)

    def round_seconds(self, k: int) -> float:
        return self.verify_cost(k) + (self.draft_seconds_per_token or 0.0) * k

    def speculative_rate(self, k: int) -> float:
        return self.expected_tokens(k) / max(self.round_seconds(k), 1e-6)

    def choose(self, limit: int | None = None) -> int:
        """K for the next round; `limit` caps it (tokens left, room left in the context). A free
        drafter's proposal costs microseconds: it is asked for the longest draft wherever the standard
        speed is known, and `cut` then verifies what pays."""
        cap = self.k_max if limit is None else max(0, min(self.k_max, limit))
        if self.fixed_k is not None:
            return min(self.fixed_k, cap)
        if cap == 0:
            return 0
        if self.standard_seconds_per_token is None:
            return 0  # measure standard speed first: the answer starts as fast as it would anyway
        if self.free:
            return cap
        best = max(range(1, cap + 1), key=self.speculative_rate)
        pays = self.speculative_rate(best) > MARGIN / self.standard_seconds_per_token
        return best if pays or self.probing() else 0

    def bins(self, source: str = "") -> list[float]:
        """What pieces from `source` proved worth, by confidence bin ("": a drafter's only source)."""
        return self.by_source.setdefault(source, _prior_bins()) if source else self.by_confidence

    def cut(self, confidence: list[float], leaving_segment: bool = False, trust: float = 1.0,
            source: str = "") -> int:
        """How many pieces of a draft with these confidences to verify: the length with the best
        expected tokens per second, each piece surviving as often as pieces as confident did here; 0
        where no length beats standard generation. All of them with a fixed K or before the standard
        speed is known. `leaving_segment`: the round would end a standard segment, and wait for the
        closed stream's token too. `trust`: what this answer's own drafts proved worth against what
        was expected of them (AnswerState.trust), which scales each piece's chance: the bins learn
        from every answer, and a chat after many edits would be verified as if it copied too."""
        if self.fixed_k is not None or self.standard_seconds_per_token is None:
            return len(confidence)
        wait = self.standard_seconds_per_token if leaving_segment else 0.0
        expected, reach, best, best_rate = 1.0, 1.0, 0, 0.0
        for length, value in enumerate(confidence, 1):
            reach *= self.survival(value, trust, source)
            expected += reach
            rate = expected / max(self.round_seconds(length) + wait, 1e-6)
            if rate > best_rate:
                best, best_rate = length, rate
        return best if best_rate * self.standard_seconds_per_token > MARGIN else 0

    def survival(self, confidence: float, trust: float = 1.0, source: str = "") -> float:
        """The chance that a piece this confident survives, as `cut` reckons it."""
        return min(self.bins(source)[_bin(confidence)] * trust, 1.0)

    def probing(self) -> bool:
        """Whether the next round is a probe (K chosen although it did not pay): verified whole, to learn.
        Never for a free drafter: what `cut` leaves out is graded against the target's text instead."""
        return not self.free and self.standard_streak >= self.probe_every

    def can_pay(self, leaving_segment: bool = False) -> bool:
        """Whether some draft length beats standard generation if every drafted token is accepted
        (K + 1 tokens a round); True until a verification has been measured. `leaving_segment`: for
        a free drafter, a draft also waits for the closed stream's token, as `cut` charges it: its
        drafts come where the text copies, each after a standard segment, and a run of rounds only
        begins with one. Where even that cannot pay, `cut` would verify nothing all answer long."""
        if not self.verify_seconds or self.standard_seconds_per_token is None:
            return True
        wait = self.standard_seconds_per_token if leaving_segment and self.free else 0.0
        best = max((k + 1) / max(self.round_seconds(k) + wait, 1e-6) for k in range(1, max(self.k_max, 1) + 1))
        return best * self.standard_seconds_per_token > MARGIN

    def skips(self, leaving_segment: bool = False) -> bool:
        """Whether the next answer goes standard from start to end: a question, nothing changes (the
        answer itself is begun with `start_answer`). A free drafter's answers go standard only where
        no verification can pay: drafts that missed cost their verification, and `cut` already keeps
        the confidences that missed from being verified. `leaving_segment`: as for `can_pay`, where
        a closed stream's token is waited for."""
        return not self._may_speculate(leaving_segment) and self.skipped + 1 < self.retry_every

    def _may_speculate(self, leaving_segment: bool) -> bool:
        return self.fixed_k is not None or (self.can_pay(leaving_segment)
                                            and (self.free or self.failed_probes < SKIP_AFTER))

    def start_answer(self, leaving_segment: bool = False) -> bool:
        """An answer begins: True when it goes standard from start to end (`skips`), which is counted.
        Where speculation has not paid but enough answers went standard, this one retries: it forgets
        what verifying cost and probes as often as at first; one more probe that does not pay, and
        answers go standard again, for twice as long (a probe that pays brings the retries back to
        RETRY_ANSWERS, in `record_round`)."""
        if self.skips(leaving_segment):
            self.skipped += 1
            return True
        if not self._may_speculate(leaving_segment):
            self.skipped, self.probe_every, self.verify_seconds, self.verified_in_runs = 0, PROBE_EVERY, {}, set()
            self.failed_probes = SKIP_AFTER - 1
            self.retry_every = min(2 * self.retry_every, MAX_RETRY_ANSWERS)
        return False

    def segment_tokens(self) -> int:
        """Tokens of the next standard segment. Each one is a new request that re-reads the last
        context token, so segments grow as speculation keeps not paying."""
        return min(SEGMENT_TOKENS * self.probe_every // PROBE_EVERY, MAX_SEGMENT_TOKENS)

    # -- learning ------------------------------------------------------------------------------

    def record_round(self, k: int, drafted: int, accepted: int, draft_seconds: float, verify_seconds: float,
                     unseen: int = 0, confidence: list[float] | None = None, after_segment: bool = False,
                     source: str = "") -> None:
        """One round: `unseen` is how many tokens the drafter had not seen before drafting (in a run of
        rounds, the previous round's emitted tokens; after a standard segment, the whole segment);
        `confidence`, the drafter's estimate for each piece verified; `after_segment`, the round
        followed a standard segment, so its verification also waited for the closed stream's token."""
        self.standard_streak = 0
        if drafted and unseen > drafted + 1 and self.draft_seconds_per_token is not None:
            catch_up = max(draft_seconds - self.draft_seconds_per_token * drafted, 0.0)
            self.catch_up_seconds_per_token = _blend(self.catch_up_seconds_per_token, catch_up / unseen)
            draft_seconds -= catch_up  # what this draft would have cost in a run of rounds
        if self.standard_seconds_per_token is not None:
            # A probe costs more than a standard step (the draft reads the whole context first): when
            # one does not pay, wait twice as long for the next. An empty draft never pays: nothing
            # was verified, and the standard segment that follows it is one more request.
            rate = (accepted + 1) / max(draft_seconds + verify_seconds, 1e-6)
            paid = drafted > 0 and rate * self.standard_seconds_per_token > MARGIN
            self.probe_every = PROBE_EVERY if paid else min(2 * self.probe_every, MAX_PROBE_EVERY)
            if drafted:  # an empty draft says nothing of the server, and a free drafter's costs nothing
                self.failed_probes = 0 if paid else self.failed_probes + 1
                if paid:
                    self.retry_every = RETRY_ANSWERS
        if drafted:
            self.draft_seconds_per_token = _blend(self.draft_seconds_per_token, draft_seconds / drafted)
            if not after_segment:
                first = drafted not in self.verified_in_runs
                self.verified_in_runs.add(drafted)
                self.verify_seconds[drafted] = _blend(None if first else self.verify_seconds.get(drafted),
                                                      verify_seconds)
            elif drafted not in self.verified_in_runs:  # a burst's cost as in a run, estimated
                waited = self.standard_seconds_per_token or 0.0
                estimate = max(verify_seconds - waited, verify_seconds / 2)
                self.verify_seconds[drafted] = _blend(self.verify_seconds.get(drafted), estimate)
        for position in range(min(accepted + 1, drafted)):
            self.acceptance[position] = _blend(self.acceptance[position], 1.0 if position < accepted else 0.0)
        self.observe_confidence(confidence or [], accepted, min(accepted + 1, drafted), source)
        if drafted < k and drafted < len(self.acceptance):
            # The drafter stopped early (p_min): the positions after it would likely fail too.
            self.acceptance[drafted] = _blend(self.acceptance[drafted], 0.0)

    def predicted(self, confidence: list[float], decided: int, source: str = "") -> float:
        """How many of the first `decided` pieces of a draft were expected to survive, as it stands now."""
        bins = self.bins(source)
        return sum(bins[_bin(value)] for value in confidence[:decided])

    def observe_confidence(self, confidence: list[float], accepted: int, decided: int, source: str = "") -> None:
        """What the first `decided` pieces of a draft turned out to be (the first `accepted` accepted,
        then one rejected if decided > accepted), by the drafter's confidence in each: from a
        verification, or from a draft that was not verified, held against the text the target then
        wrote (`AnswerState.grade_unverified`, as the standard segment after it goes), so that
        confidences not worth verifying yet are still learned. `source`: where the draft was found."""
        bins = self.bins(source)
        for position in range(min(decided, len(confidence))):
            index = _bin(confidence[position])
            bins[index] = _blend(bins[index], 1.0 if position < accepted else 0.0)

    def record_verification(self, k: int, seconds: float) -> None:
        """What verifying `k` tokens cost, measured apart from a round (nothing was drafted)."""
        self.verify_seconds[k] = _blend(self.verify_seconds.get(k), seconds)

    def record_standard(self, tokens: int, seconds: float) -> None:
        """A standard segment: `seconds` between its first and last token, for `tokens` - 1 steps."""
        self.standard_streak += 1
        if tokens > 1:
            self.standard_seconds_per_token = _blend(self.standard_seconds_per_token, seconds / (tokens - 1))


_controllers: dict[tuple, DraftLengthController] = {}


def controller_for(key: tuple, k_max: int, fixed_k: int | None, free: bool = False) -> DraftLengthController:
    """One controller per (server, target, drafter, method) for the life of the process, so that what
    one answer learned helps the next."""
    full_key = (*key, k_max, fixed_k)
    if full_key not in _controllers:
        _controllers[full_key] = DraftLengthController(k_max=k_max, fixed_k=fixed_k, free=free)
    return _controllers[full_key]


def clear_controllers() -> None:
    """Forgets every controller and what it learned (tests start from a fresh process's state)."""
    _controllers.clear()
