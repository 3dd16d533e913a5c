"""The controller's long bursts for sure copies and its retry of a drafter set aside for an answer that
copies (issues 40 and 44), fed measurements directly as in test_controller.py."""

from __future__ import annotations

from utils.engine.controller import (
    CHAIN_K,
    LONG_SURE,
    PROBE_EVERY,
    RETRY_ANSWERS,
    SKIP_AFTER,
    Adaptive,
    FreeDrafts,
    new_controller,
)

STANDARD = 0.05  # seconds per standard token in these tests


def measured(k_max: int, free: bool = False) -> Adaptive:
    controller = new_controller(k_max, None, free)
    assert isinstance(controller, Adaptive)
    controller.record_standard(tokens=17, seconds=16 * STANDARD)  # 16 steps of 50 ms
    return controller


# -- long bursts for sure copies ---------------------------------------------------------------------


def copying(k_max: int = 16) -> FreeDrafts:
    """A free drafter's controller on a server where a burst costs 2 standard tokens and a row a tenth
    of one (50 ms, 5 ms: about what K = 8 to 16 cost in process on this CPU), whose pieces at
    confidence 0.75 (a suffix tree's copy) survived 24 times in a row."""
    controller = measured(k_max=k_max, free=True)
    assert isinstance(controller, FreeDrafts)
    controller.record_verification(4, 0.12)
    controller.record_verification(8, 0.14)
    for _ in range(24):
        controller.calibration.observe_confidence([0.75], accepted=1, decided=1)
    return controller


def test_a_sure_copy_is_verified_past_the_chain_length_where_rows_are_cheap() -> None:
    controller = copying()
    assert CHAIN_K == 8 and controller.chain == 8 and controller.survival(0.75) >= LONG_SURE
    # 16 pieces that each survive 0.996 of the time: 16.5 tokens in 180 ms, where 8 give 8.9 in 140 ms.
    assert controller.cut([0.75] * 16) == 16
    # Only as far as the pieces are sure: past 8, a piece at 0.55 (its bin's prior) ends the draft.
    assert controller.cut([0.75] * 12 + [0.55] * 4) == 12
    # With k_max 8, as before: 8 at most.
    assert copying(k_max=8).cut([0.75] * 16) == 8


def test_a_draft_that_is_not_sure_is_verified_up_to_the_chain_length_at_most() -> None:
    controller = copying()
    controller.calibration.by_confidence[9] = 0.85  # sure enough to verify, not for a long burst
    assert controller.survival(0.95) < LONG_SURE
    assert controller.cut([0.95] * 16) == 8
    # An answer whose drafts did better than expected trusts them more (LossBudget.trust): that
    # scales what each piece is expected to give, but does not make it sure.
    assert controller.survival(0.95, trust=1.2) >= LONG_SURE
    assert controller.cut([0.95] * 16, trust=1.2) == 8
    assert controller.cut([0.75] * 16, trust=0.5) <= 8  # a trust below 1 lowers the bar's reading too


def test_no_long_burst_before_what_verifying_costs_is_measured_or_where_rows_are_dear() -> None:
    controller = copying()
    controller.cost.forget_verifications()  # the prior: every long burst would look cheap
    assert controller.cut([0.75] * 16) == 8
    # Measured where rows past 4 cost as much as a standard token each (a server that queues the
    # requests): each further piece adds at most one token for a token's time: 4 pay best.
    controller.record_verification(4, 0.1)
    controller.record_verification(8, 0.3)
    assert controller.cut([0.75] * 16) == 4


def test_a_draft_models_k_stays_within_the_chain_length() -> None:
    """A draft model's K is chosen before its draft's confidences are known: never past CHAIN_K."""
    controller = measured(k_max=16)
    controller.record_round(k=8, drafted=8, accepted=8, draft_seconds=0.0, verify_seconds=0.06)
    for _ in range(20):
        controller.calibration.observe_positions(16, 16, 16)  # every position always survives
    assert controller.choose() == 8 and controller.longest == 8
    assert measured(k_max=4).longest == 4


# -- an answer that copies retries a drafter set aside ---------------------------------------------


def set_aside() -> Adaptive:
    """A draft model's controller after SKIP_AFTER probes that did not pay: answers go standard."""
    controller = measured(k_max=4)
    for _ in range(SKIP_AFTER):
        controller.record_round(k=4, drafted=4, accepted=0, draft_seconds=0.2, verify_seconds=0.1)
    assert controller.skips()
    return controller


def test_an_answer_that_copies_retries_a_drafter_set_aside_at_once() -> None:
    controller = set_aside()
    assert controller.start_answer() is True and controller.skipped == 1  # a question that copies nothing
    controller.cost.record_verification(4, 0.1)
    assert controller.start_answer(copies=True) is False  # one that copies speculates ...
    assert controller.failed_probes == SKIP_AFTER - 1 and controller.probe_every == PROBE_EVERY
    assert not controller.cost.verify_seconds  # ... measuring afresh what verifying costs
    # The schedule of the retries that are due anyway is left as it was.
    assert controller.skipped == 1 and controller.retry_every == RETRY_ANSWERS


def test_an_answer_that_copies_changes_nothing_where_speculation_pays() -> None:
    controller = measured(k_max=4)
    assert controller.start_answer(copies=True) is False
    assert (controller.skipped, controller.failed_probes, controller.retry_every) == (0, 0, RETRY_ANSWERS)


def test_the_retry_that_is_due_restarts_the_schedule_whether_it_copies_or_not() -> None:
    for copies in (False, True):
        controller = set_aside()
        controller.skipped = RETRY_ANSWERS - 1  # the 8th answer: a retry is due
        assert controller.start_answer(copies=copies) is False
        assert controller.skipped == 0 and controller.retry_every == 2 * RETRY_ANSWERS
