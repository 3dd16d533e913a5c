"""What drafting, verifying and a standard token cost on one server, learned live (controller.py reads it).

What verifying K pieces costs is interpolated between the lengths measured here, from a standard
token's time at K = 0 (a burst is one request more than a step, and each piece one row more), and
extended past the longest by the slope of the last two: measured at K = 8 alone, on this 2-core CPU
a K = 2 verification was 81 ms by this rule and 78 ms measured, where 10% per K gave 196 ms.

A round right after a standard segment also waits for the token the closed stream was computing:
the server had just begun it when the stream was closed, so about one standard token (measured on
this CPU: 74 ms for K = 1 after a segment, a burst alone 43 ms, a standard token 31.5 ms). That wait
is not what a verification costs: it is taken out of what the round teaches
(`waited_for_closed_token`), and the policy charges it where a standard segment is left for a draft.

Under load (`others`: the other answers in progress on the model when these costs were measured, one
cost model per load, controller.py) a burst's rows ride in the same decode as the other answers'
tokens, so each of them waits what the burst costs beyond a standard step. A round is charged that
wait too, once per other answer: speculation pays only where the whole server gains.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SMOOTHING = 0.2  # weight of the newest measurement in the running averages


def blend(old: float | None, new: float) -> float:
    return new if old is None else (1 - SMOOTHING) * old + SMOOTHING * new


@dataclass
class CostModel:
    """Seconds per standard token, per verification of K pieces, per drafted piece and per piece a
    draft model reads to catch up; None (or absent) until measured."""

    standard_seconds_per_token: float | None = None
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
    others: int = 0  # the other answers in the same decodes as the rounds measured here (the load)

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
        """A round of `k` drafted pieces: drafting them and verifying them, and, under load, what its
        burst delays each other answer in the same decode (`crowding`)."""
        return self.verify_cost(k) + (self.draft_seconds_per_token or 0.0) * k + self.others * self.crowding(k)

    def crowding(self, k: int) -> float:
        """What a burst of `k` pieces costs beyond a standard step: what each other answer evaluated in
        the same decode waits for it (on this 2-core CPU each row is computed, not only read)."""
        return max(self.verify_cost(k) - (self.standard_seconds_per_token or 0.05), 0.0) if self.others else 0.0

    def closed_token_wait(self, waits_for_closed_token: bool) -> float:
        """What a round also waits for the closed stream's token: about one standard token."""
        return (self.standard_seconds_per_token or 0.0) if waits_for_closed_token else 0.0

    def record_standard(self, tokens: int, seconds: float) -> None:
        """A standard segment: `seconds` between its first and last token, for `tokens` - 1 steps."""
        if tokens > 1:
            self.standard_seconds_per_token = blend(self.standard_seconds_per_token, seconds / (tokens - 1))

    def record_verification(self, k: int, seconds: float) -> None:
        """What verifying `k` tokens cost, measured apart from a round (nothing was drafted)."""
        self.verify_seconds[k] = blend(self.verify_seconds.get(k), seconds)

    def record_round(self, drafted: int, draft_seconds: float, verify_seconds: float, unseen: int,
                     waited_for_closed_token: bool, learn_verify: bool = True) -> float:
        """A round that drafted `drafted` pieces, `unseen` tokens after the drafter's last context;
        returns what its draft would have cost in a run of rounds (without the catch-up). Without
        `learn_verify` (a tree's round: more rows than `drafted`) its verification teaches nothing."""
        if drafted and unseen > drafted + 1 and self.draft_seconds_per_token is not None:
            catch_up = max(draft_seconds - self.draft_seconds_per_token * drafted, 0.0)
            self.catch_up_seconds_per_token = blend(self.catch_up_seconds_per_token, catch_up / unseen)
            draft_seconds -= catch_up
        if not drafted:
            return draft_seconds
        self.draft_seconds_per_token = blend(self.draft_seconds_per_token, draft_seconds / drafted)
        if not learn_verify:
            return draft_seconds
        if not waited_for_closed_token:
            first = drafted not in self.verified_in_runs
            self.verified_in_runs.add(drafted)
            self.verify_seconds[drafted] = blend(None if first else self.verify_seconds.get(drafted), verify_seconds)
        elif drafted not in self.verified_in_runs:  # a burst's cost as in a run, estimated
            waited = self.standard_seconds_per_token or 0.0
            estimate = max(verify_seconds - waited, verify_seconds / 2)
            self.verify_seconds[drafted] = blend(self.verify_seconds.get(drafted), estimate)
        return draft_seconds

    def forget_verifications(self) -> None:
        """Measure what verifying costs afresh (a retry: the server may have changed)."""
        self.verify_seconds, self.verified_in_runs = {}, set()
