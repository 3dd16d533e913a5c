"""The draft-length controller's decisions and bookkeeping, fed measurements directly."""

from __future__ import annotations

import pytest

from utils.engine.budget import LossBudget
from utils.engine.calibration import Calibration
from utils.engine.controller import (
    MAX_PROBE_EVERY,
    MAX_RETRY_ANSWERS,
    MAX_SEGMENT_TOKENS,
    PROBE_EVERY,
    RETRY_ANSWERS,
    SEGMENT_TOKENS,
    SKIP_AFTER,
    Adaptive,
    DraftLengthController,
    FixedK,
    FreeDrafts,
    new_controller,
)
from utils.engine.memory import EngineMemory

STANDARD = 0.05  # seconds per standard token in these tests


def measured(k_max: int = 4, fixed_k: int | None = None, free: bool = False) -> DraftLengthController:
    controller = new_controller(k_max, fixed_k, free)
    controller.record_standard(tokens=17, seconds=16 * STANDARD)  # 16 steps of 50 ms
    return controller


def test_standard_first_until_its_speed_is_known() -> None:
    controller = Adaptive(k_max=4)
    assert controller.calibration.acceptance == [0.6] * 4  # the prior
    assert controller.choose() == 0
    controller.record_standard(tokens=1, seconds=0.3)  # one token: no step between tokens to time
    assert controller.cost.standard_seconds_per_token is None and controller.standard_streak == 1
    assert controller.choose() == 0
    controller.record_standard(tokens=17, seconds=0.8)
    assert controller.cost.standard_seconds_per_token == pytest.approx(STANDARD)
    assert controller.choose() > 0


def test_the_prior_tries_speculation_with_the_best_expected_rate() -> None:
    controller = measured()
    # Verification assumed to cost S (1 + 0.15 K), drafting free; E(K) = 1 + 0.6 + 0.36 + ...
    rates = {1: 1.6 / 0.0575, 2: 1.96 / 0.065, 3: 2.176 / 0.0725, 4: 2.3056 / 0.08}
    for k, rate in rates.items():
        assert controller.speculative_rate(k) == pytest.approx(rate)
    assert controller.choose() == 2


def test_high_acceptance_and_cheap_verification_choose_the_longest_draft() -> None:
    controller = measured()
    controller.record_round(k=4, drafted=4, accepted=4, draft_seconds=0.004, verify_seconds=0.06)
    assert controller.calibration.acceptance == pytest.approx([0.68] * 4)  # 0.8 * 0.6 + 0.2 * 1
    assert controller.cost.draft_seconds_per_token == pytest.approx(0.001)
    assert controller.cost.verify_seconds == {4: 0.06}
    assert controller.probe_every == PROBE_EVERY
    # K = 4: E = 1 + .68 + .68^2 + .68^3 + .68^4 tokens in 0.06 + 4 * 0.001 seconds.
    assert controller.calibration.expected_tokens(4) == pytest.approx(2.67064576)
    assert controller.cost.round_seconds(4) == pytest.approx(0.064)
    # K = 2: on the line from a standard token's time (0.05) at K = 0 to 0.06 at K = 4, and drafting.
    assert controller.cost.round_seconds(2) == pytest.approx(0.055 + 0.002)
    assert controller.choose() == 4


@pytest.mark.parametrize(("limit", "k"), [(None, 4), (3, 3), (1, 1), (0, 0), (-2, 0), (99, 4)])
def test_limit_caps_the_choice(limit: int | None, k: int) -> None:
    controller = measured()
    controller.record_round(k=4, drafted=4, accepted=4, draft_seconds=0.004, verify_seconds=0.06)
    assert controller.choose(limit) == k


@pytest.mark.parametrize(("limit", "k"), [(None, 3), (2, 2), (0, 0)])
def test_fixed_k_is_used_from_the_start_within_the_limit(limit: int | None, k: int) -> None:
    controller = FixedK(k_max=8, k=3)
    assert controller.choose(limit) == k


def test_fixed_k_above_k_max_is_capped() -> None:
    assert FixedK(k_max=2, k=5).choose() == 2


def test_falls_to_zero_and_backs_off_when_speculation_does_not_pay() -> None:
    controller = measured(k_max=2)
    # A slow verification that accepted nothing: 1 token in 0.4 s against 20 tokens/s standard.
    controller.record_round(k=2, drafted=2, accepted=0, draft_seconds=0.1, verify_seconds=0.3)
    assert controller.calibration.acceptance == pytest.approx([0.48, 0.6])  # position 1 was never reached
    assert controller.probe_every == 2 * PROBE_EVERY
    assert controller.segment_tokens() == 2 * SEGMENT_TOKENS
    assert controller.choose() == 0
    for _ in range(2 * PROBE_EVERY - 1):
        controller.record_standard(tokens=17, seconds=0.8)
        assert controller.choose() == 0
    controller.record_standard(tokens=17, seconds=0.8)
    # Enough standard segments: probe with the best K, although it is not expected to pay.
    assert controller.speculative_rate(2) == pytest.approx(1.768 / 0.4)
    # K = 1: verifying costs 0.175 s on the line from a standard token (0.05 s) to K = 2's 0.3 s.
    assert controller.speculative_rate(1) == pytest.approx(1.48 / 0.225)
    assert controller.choose() == 1


def test_failed_probes_double_the_wait_up_to_a_limit_and_a_paying_one_resets_it() -> None:
    controller = measured(k_max=2)
    waits, segments = [], []
    for _ in range(6):
        controller.record_round(k=2, drafted=2, accepted=0, draft_seconds=0.1, verify_seconds=0.3)
        waits.append(controller.probe_every)
        segments.append(controller.segment_tokens())
    assert waits == [8, 16, 32, 64, 64, 64]
    assert MAX_PROBE_EVERY == 64
    assert segments == [32, 64, 128, 128, 128, 128]
    assert MAX_SEGMENT_TOKENS == 128
    controller.record_round(k=2, drafted=2, accepted=2, draft_seconds=0.01, verify_seconds=0.05)
    assert controller.probe_every == PROBE_EVERY and controller.segment_tokens() == SEGMENT_TOKENS


def test_a_short_draft_counts_against_the_next_position() -> None:
    controller = measured()
    controller.record_round(k=4, drafted=2, accepted=2, draft_seconds=0.002, verify_seconds=0.05)
    # Positions 0 and 1 accepted; the drafter stopped before position 2, which learns a miss.
    assert controller.calibration.acceptance == pytest.approx([0.68, 0.68, 0.48, 0.6])
    assert controller.cost.verify_seconds == {2: 0.05}


def test_measurements_are_running_averages() -> None:
    controller = measured()
    controller.record_standard(tokens=11, seconds=10 * 0.1)
    assert controller.cost.standard_seconds_per_token == pytest.approx(0.8 * 0.05 + 0.2 * 0.1)
    controller.record_round(k=2, drafted=2, accepted=1, draft_seconds=0.02, verify_seconds=0.1)
    controller.record_round(k=2, drafted=2, accepted=1, draft_seconds=0.04, verify_seconds=0.2)
    assert controller.cost.draft_seconds_per_token == pytest.approx(0.8 * 0.01 + 0.2 * 0.02)
    assert controller.cost.verify_seconds[2] == pytest.approx(0.8 * 0.1 + 0.2 * 0.2)
    # Position 0 accepted twice, position 1 missed twice, positions 2.. never reached.
    assert controller.calibration.acceptance == pytest.approx([0.744, 0.384, 0.6, 0.6])


def test_expected_tokens() -> None:
    calibration = Calibration(3, acceptance=[0.5, 0.5, 0.5])
    assert [calibration.expected_tokens(k) for k in range(4)] == [1.0, 1.5, 1.75, 1.875]


def test_the_verification_prior_before_anything_is_measured() -> None:
    assert Adaptive(k_max=4).cost.round_seconds(2) == pytest.approx(0.05 * 1.3)


def test_one_controller_per_key_in_a_memory() -> None:
    key = ("unit-test-server", "target", "drafter", "greedy")
    memory = EngineMemory()
    first = memory.controller(key, 8, None, free=False)
    assert memory.controller(key, 8, None, free=False) is first and isinstance(first, Adaptive)
    assert isinstance(memory.controller(key, 8, 3, free=False), FixedK)
    assert memory.controller(key, 4, None, free=False) is not first
    assert EngineMemory().controller(key, 8, None, free=False) is not first  # another owner's memory


def test_a_draft_after_a_standard_segment_is_charged_its_catch_up_apart() -> None:
    """After 64 standard tokens the draft model first reads them: that prefill is learned per unseen
    token and not charged to drafting, so the probe is judged by what a run of rounds costs."""
    controller = Adaptive(k_max=4)
    controller.record_standard(17, 16 * 0.05)  # 50 ms a standard token
    controller.record_round(4, 4, 4, draft_seconds=0.02, verify_seconds=0.06, unseen=2)  # 5 ms a draft token
    assert controller.cost.draft_seconds_per_token == pytest.approx(0.005)
    controller.record_round(4, 4, 4, draft_seconds=0.02 + 64 * 0.002, verify_seconds=0.06, unseen=64)
    assert controller.cost.catch_up_seconds_per_token == pytest.approx(0.002)
    assert controller.cost.draft_seconds_per_token == pytest.approx(0.005)  # unchanged by the prefill
    assert controller.probe_every == PROBE_EVERY  # 5 tokens in 80 ms beat 50 ms a token: it paid


def test_a_server_that_verifies_one_request_at_a_time_is_skipped_with_rarer_and_rarer_retries() -> None:
    """Verifying K drafts there costs K+1 standard tokens and more: no K pays even if all are accepted,
    so whole answers go standard, but for a retry that forgets and measures again: after RETRY_ANSWERS
    skipped answers, then after twice as many each time the retry finds the same, up to MAX_RETRY_ANSWERS."""
    controller = measured()
    assert controller.can_pay() and not controller.skips()  # nothing measured yet
    controller.record_verification(4, 5.5 * STANDARD)  # 5 requests one after another, plus HTTP
    assert not controller.can_pay()
    decisions = []
    for _ in range(RETRY_ANSWERS * (1 + 2 + 4 + 8 + 8 + 8)):
        skip = controller.start_answer()
        decisions.append(skip)
        if not skip and not controller.cost.verify_seconds:  # the retry measures again, and finds the same
            assert controller.can_pay()
            controller.record_verification(4, 5.5 * STANDARD)
    retries = [index + 1 for index, skip in enumerate(decisions) if not skip]
    assert [b - a for a, b in zip([0, *retries], retries)] == [8, 16, 32, 64, 64, 64]
    assert MAX_RETRY_ANSWERS == 64 and RETRY_ANSWERS == 8


def test_a_retry_that_pays_brings_the_retries_back_to_their_first_rate() -> None:
    controller = measured()
    controller.record_verification(4, 5.5 * STANDARD)
    for _ in range(RETRY_ANSWERS + 2 * RETRY_ANSWERS):  # two retries that did not pay
        if not controller.start_answer() and not controller.cost.verify_seconds:
            controller.record_verification(4, 5.5 * STANDARD)
    assert controller.retry_every == 4 * RETRY_ANSWERS
    while controller.start_answer():
        pass
    controller.record_round(4, 4, 4, 0.0, 2 * STANDARD)  # the server batches now: 5 tokens for 2
    assert controller.retry_every == RETRY_ANSWERS and not controller.skips()


def test_a_batching_server_is_never_skipped() -> None:
    controller = measured()
    controller.record_verification(4, 1.3 * STANDARD)  # five rows in one decode
    assert controller.can_pay() and not controller.skips()


def test_probes_that_draft_and_do_not_pay_lead_to_skipping_and_empty_drafts_do_not() -> None:
    controller = measured()
    for _ in range(2 * SKIP_AFTER):
        controller.record_round(4, 0, 0, 0.0, 0.0)  # lookup found nothing: says nothing of the server
    assert not controller.skips()
    for _ in range(SKIP_AFTER):  # drafted, mostly rejected, verification cheap enough to pay if accepted
        controller.record_round(4, 4, 0, 0.0, 2 * STANDARD)
    assert controller.can_pay() and controller.skips() and controller.skips()  # asking changes nothing
    assert controller.start_answer() and controller.skipped == 1
    controller.record_round(4, 4, 4, 0.0, 2 * STANDARD)  # one that pays
    assert not controller.skips()


def test_an_empty_draft_is_a_probe_that_did_not_pay():
    controller = Adaptive(k_max=4)
    controller.record_standard(tokens=17, seconds=16 * 0.05)  # 50 ms a standard token
    # Prompt lookup found nothing: no time spent, nothing verified. It must not look like a win.
    controller.record_round(k=4, drafted=0, accepted=0, draft_seconds=0.0001, verify_seconds=0.0)
    assert controller.probe_every == 2 * PROBE_EVERY
    controller.record_round(k=4, drafted=0, accepted=0, draft_seconds=0.0001, verify_seconds=0.0)
    assert controller.probe_every == 4 * PROBE_EVERY
    # A draft that pays (5 tokens in 70 ms against 50 ms a token) brings frequent probes back.
    controller.record_round(k=4, drafted=4, accepted=4, draft_seconds=0.01, verify_seconds=0.06)
    assert controller.probe_every == PROBE_EVERY


def test_a_confident_draft_is_cut_where_one_more_piece_no_longer_pays() -> None:
    controller = measured(k_max=8)  # a standard token: 50 ms, 20 tokens/s
    controller.record_verification(8, 0.2)  # verifying 8 pieces: 200 ms; 50 ms + 18.75 ms a piece
    # Nothing verified yet: a piece survives as often as its confidence bin's centre says.
    assert controller.cut([0.99] * 8) == 7  # 1 + .95 + ... + .95^7 = 6.73 tokens in 181 ms; 7.40 in 200
    assert controller.cut([0.55] * 8) == 1  # 1.55 tokens in 69 ms: 22.5 a second, standard does 20
    assert controller.cut([0.35] * 8) == 0  # 1.35 tokens in 69 ms: 19.6 a second
    # Four sure pieces, then four unlikely ones: 4.52 tokens in 125 ms; a fifth adds 0.04 for 19 ms more.
    assert controller.cut([0.99] * 4 + [0.05] * 4) == 4


def test_what_a_confidence_is_worth_is_learned_from_the_verifications() -> None:
    controller = measured(k_max=8)
    # Verifying 8 pieces costs 8 standard tokens here; two survived, the third did not.
    controller.record_round(8, 8, 2, 0.0, 0.4, confidence=[0.99] * 8)
    # Bin 0.9-1.0 blended three times: 0.95 -> 0.96 (kept) -> 0.968 (kept) -> 0.7744 (rejected).
    assert controller.calibration.by_confidence[9] == pytest.approx(0.7744)
    assert controller.calibration.by_confidence[:9] == pytest.approx([(b + 0.5) / 10 for b in range(9)])  # untouched
    assert controller.cut([0.99] * 8) == 0  # no longer worth verifying on this server


def test_a_draft_is_verified_whole_with_a_fixed_k_or_before_standard_speed_is_known() -> None:
    assert FixedK(k_max=8, k=4).cut([0.01] * 4) == 4
    assert Adaptive(k_max=8).cut([0.01] * 4) == 4  # the standard speed is not known yet


def test_a_free_drafter_is_asked_for_the_longest_draft_where_no_k_pays() -> None:
    controller, free = measured(k_max=8), measured(k_max=8, free=True)
    for each in (controller, free):
        each.record_verification(8, 1.0)  # 20 standard tokens' time: nothing pays
    assert controller.choose(6) == 0 and free.choose(6) == 6
    assert FreeDrafts(k_max=8).choose() == 0  # the standard speed comes first


def test_a_free_drafter_never_probes_and_skips_answers_only_where_no_verification_can_pay() -> None:
    controller = measured(k_max=8, free=True)
    for _ in range(3 * MAX_PROBE_EVERY):
        controller.record_standard(tokens=17, seconds=0.8)
        controller.record_round(k=8, drafted=4, accepted=0, draft_seconds=0.0, verify_seconds=0.2)
    assert not controller.probing() and not controller.skips()  # drafts that missed: `cut` learns them
    controller.record_verification(8, 1.0)  # but once no K could pay even if all were accepted ...
    controller.cost.verify_seconds.pop(4)
    assert not controller.can_pay() and controller.skips()  # ... whole answers go standard


def test_the_cost_of_a_verification_is_interpolated_between_the_lengths_measured() -> None:
    controller = measured(k_max=8)  # a standard token: 0.05 s
    controller.record_verification(8, 0.21)
    # Measured at K = 8 alone: on the line from K = 0 (a standard token), 0.02 s a piece.
    assert [controller.cost.verify_cost(k) for k in (1, 2, 8)] == pytest.approx([0.07, 0.09, 0.21])
    controller.record_verification(2, 0.08)
    assert [controller.cost.verify_cost(k) for k in (1, 2, 5)] == pytest.approx([0.065, 0.08, 0.145])
    # Past the longest measured, the last two lengths' slope; never less than the longest's cost.
    assert controller.cost.verify_cost(10) == pytest.approx(0.21 + 2 * 0.13 / 6)
    controller.record_verification(4, 0.2)  # noise: a longer verification measured cheaper
    controller.cost.verify_seconds[8] = 0.15
    assert controller.cost.verify_cost(10) == pytest.approx(0.15)


def test_a_draft_that_was_not_verified_teaches_only_the_positions_the_target_decided() -> None:
    controller = measured(k_max=8)
    # Three pieces at 0.95: the target then wrote the first two and contradicted the third.
    controller.calibration.observe_confidence([0.95, 0.95, 0.95, 0.35], accepted=2, decided=3)
    assert controller.calibration.by_confidence[9] == pytest.approx(0.7744)  # kept, kept, rejected (as above)
    assert controller.calibration.by_confidence[3] == pytest.approx(0.35)  # the fourth was never reached
    controller.calibration.observe_confidence([0.35], accepted=0, decided=0)  # the target has not got that far
    assert controller.calibration.by_confidence[3] == pytest.approx(0.35)


def test_the_closed_streams_token_is_charged_once_when_a_segment_is_left_not_every_round() -> None:
    # As measured on this CPU (in units of a 50 ms standard token): a burst of 8 costs 3.2 tokens
    # alone; right after a standard segment the round also waits about one token more.
    controller = measured(k_max=8, free=True)
    controller.record_round(8, 8, 8, 0.0, 4.2 * STANDARD, waited_for_closed_token=True)
    assert controller.cost.verify_seconds[8] == pytest.approx(3.2 * STANDARD)  # what a round in a run costs
    controller.record_round(8, 8, 8, 0.0, 3.2 * STANDARD)
    assert controller.cost.verify_seconds[8] == pytest.approx(3.2 * STANDARD)
    # Eight pieces each surviving as 0.75 did: 3.7 tokens. In a run of rounds, 3.7 for 3.2 pays; to
    # leave a standard segment, 3.7 for 4.2 does not, while a draft twice as sure still does.
    sure, surer = [0.75] * 8, [0.95] * 8
    controller.calibration.by_confidence[7], controller.calibration.by_confidence[9] = 0.75, 0.95
    assert controller.cut(sure) > 0
    assert controller.cut(sure, waits_for_closed_token=True) == 0
    assert controller.cut(surer, waits_for_closed_token=True) == 8


def test_a_run_of_rounds_measures_a_verification_and_estimates_after_segments_no_longer_move_it() -> None:
    # A one-slot server under load (units of a standard token): a K = 4 burst right after a segment
    # took 4.4 (estimated 3.4 in a run), in a run it took 5.2, and later after a segment 4.4 again.
    controller = measured(k_max=8, free=True)
    controller.record_round(8, 4, 4, 0.0, 4.4 * STANDARD, waited_for_closed_token=True)
    assert controller.cost.verify_seconds[4] == pytest.approx(3.4 * STANDARD)
    controller.record_round(8, 4, 4, 0.0, 5.2 * STANDARD)
    assert controller.cost.verify_seconds[4] == pytest.approx(5.2 * STANDARD)  # measured: the estimate goes
    controller.record_round(8, 4, 4, 0.0, 4.4 * STANDARD, waited_for_closed_token=True)
    controller.record_round(8, 8, 0, 0.0, 9.0 * STANDARD, waited_for_closed_token=True)  # K = 8: an estimate still
    assert controller.cost.verify_seconds == pytest.approx({4: 5.2 * STANDARD, 8: 8.0 * STANDARD})


def test_a_free_drafter_that_must_leave_a_segment_to_draft_skips_where_even_all_accepted_cannot_pay() -> None:
    # One request at a time: verifying 4 pieces costs 4.4 standard tokens, so 5 tokens in 4.4 pay in a
    # run of rounds; but a free drafter's drafts each leave a standard segment, and wait for the
    # closed stream's token too (5 for 5.4), where `cut` would never verify one: answers go standard.
    one_slot, batching = measured(k_max=4, free=True), measured(k_max=8, free=True)
    one_slot.record_verification(4, 4.4 * STANDARD)
    batching.record_verification(8, 3.2 * STANDARD)
    assert one_slot.can_pay() and not one_slot.skips()  # in process (a drained stream): no wait
    assert not one_slot.can_pay(waits_for_closed_token=True) and one_slot.skips(waits_for_closed_token=True)
    assert one_slot.cut([0.95] * 4, waits_for_closed_token=True) == 0
    assert batching.can_pay(waits_for_closed_token=True) and not batching.skips(waits_for_closed_token=True)


def test_an_answer_whose_drafts_miss_trusts_them_less_than_the_bins_do() -> None:
    """The bins learn from every answer; an answer's own misses scale its pieces' chances down
    (LossBudget.trust), so a chat among edits stops verifying what other answers copied."""
    controller = measured(k_max=8)
    controller.record_verification(8, 0.2)  # as above: 50 ms + 18.75 ms a piece
    answer = LossBudget(controller)
    sure = [0.95] * 8  # bin 0.9-1.0: 0.95 a piece, as nothing was verified yet
    assert answer.trust() == 1.0 and controller.cut(sure, trust=answer.trust()) == 7
    for _ in range(3):  # three drafts whose first piece, expected at 0.95, did not survive
        answer.tally(sure, accepted=0, decided=1)
    assert answer.trust() == pytest.approx(2 / 4.85)  # (0 + 2) / (2.85 + 2)
    assert controller.cut(sure, trust=answer.trust()) == 0  # 0.39 a piece: no length pays
    answer.tally(sure, accepted=8, decided=8)  # then a copy: 8 survived where 7.6 were expected
    assert answer.trust() == pytest.approx(10 / 12.45) and controller.cut(sure, trust=answer.trust()) == 2


def test_each_source_of_drafts_has_its_own_bins() -> None:
    """Pieces as confident survive as often as their own source's did (the suffix drafter's earlier
    answers against the answer's own text); an unnamed source keeps `by_confidence`."""
    controller = measured(k_max=8)
    controller.record_verification(8, 0.2)
    for _ in range(6):  # the shared tree's confident pieces keep failing at once
        controller.record_round(8, 8, 0, 0.0, 0.2, confidence=[0.95] * 8, source="shared")
    assert controller.calibration.bins("shared")[9] < 0.3
    assert controller.calibration.bins("answer")[9] == controller.calibration.by_confidence[9] == pytest.approx(0.95)
    assert controller.cut([0.95] * 8, source="shared") == 0
    assert controller.cut([0.95] * 8, source="answer") == controller.cut([0.95] * 8) == 7
    calibration = controller.calibration
    assert calibration.predicted([0.95] * 2, 2, "shared") < calibration.predicted([0.95] * 2, 2, "answer")
