"""An answer's loss budget (budget.py LossBudget.affordable): what its verifications may lose against standard
generation, so that drafts that keep missing cannot make one answer much slower than standard."""

from __future__ import annotations

import pytest

from utils.engine.budget import FREE_MISSES, LOSS_BUDGET, SURE, LossBudget
from utils.engine.controller import Adaptive, DraftLengthController, FixedK
from utils.engine.drafters import Draft

STANDARD = 0.05  # seconds per standard token
PIECE = 0.01875  # what each verified piece adds to a round: a K = 8 burst measured at 0.2 s


def answer_with(controller: DraftLengthController) -> LossBudget:
    return LossBudget(controller)


def measured(fixed_k: int | None = None) -> DraftLengthController:
    controller = Adaptive(k_max=8) if fixed_k is None else FixedK(k_max=8, k=fixed_k)
    controller.record_standard(tokens=17, seconds=16 * STANDARD)
    controller.record_verification(8, 0.2)  # a round of K pieces: 50 ms + 18.75 ms a piece
    return controller


def test_the_budget_allows_only_what_could_all_miss_and_stay_within_it() -> None:
    answer = answer_with(measured())
    assert FREE_MISSES == 2  # early on, what two missed one-piece drafts lose: 37.5 ms
    assert answer.affordable() == 2  # a round whose first piece misses loses 18.75 ms a piece
    answer.settle(emitted=1, seconds=STANDARD + PIECE)  # it missed
    assert answer.gained == pytest.approx(-PIECE) and answer.affordable() == 1
    answer.settle(emitted=1, seconds=STANDARD + PIECE)  # and again
    assert answer.affordable() == 0
    answer.settle(emitted=5, seconds=STANDARD + 4 * PIECE)  # a draft of 4 that survived whole
    assert answer.gained == pytest.approx(4 * STANDARD - 6 * PIECE)
    assert answer.affordable() == 6  # (0.0875 + 0.0375) / 0.01875 = 6.7 pieces may miss
    # Over HTTP a round after a standard segment also waits for the closed stream's token: one
    # standard token more, lost whatever the draft, and in what the free misses allow.
    assert answer.affordable(waits_for_closed_token=True) == 8


def test_the_budget_grows_with_the_answer() -> None:
    answer = answer_with(measured())
    for _ in range(2):
        answer.settle(emitted=1, seconds=STANDARD + PIECE)
    assert answer.affordable() == 0
    answer.started -= 9.0  # nine seconds into the answer: 1.5% of it is 135 ms
    assert LOSS_BUDGET == 0.015 and answer.affordable() == 5  # (0.135 - 0.0375) / 0.01875 = 5.2


def test_no_budget_before_the_standard_speed_is_known_nor_for_a_fixed_k() -> None:
    unmeasured = answer_with(Adaptive(k_max=8))
    assert unmeasured.affordable() == 8
    unmeasured.settle(emitted=1, seconds=1.0)  # nothing to hold a round against yet
    assert unmeasured.gained == 0.0
    fixed = answer_with(measured(fixed_k=4))
    fixed.settle(emitted=1, seconds=1.0)
    assert fixed.gained < -0.9 and fixed.affordable() == 8  # a fixed K is verified as asked


def test_a_draft_whose_first_piece_is_sure_goes_past_the_budget() -> None:
    """The copies of earlier turns are verified whatever earlier misses cost, once the answer has seen
    one of its own pieces survive; a close call is not."""
    answer = answer_with(measured())
    for _ in range(2):
        answer.settle(emitted=1, seconds=STANDARD + PIECE)
    assert answer.affordable() == 0
    assert SURE == 0.75
    copy = Draft(["a", "b", "c"], confidence=[0.95, 0.95, 0.95])  # bin 0.9-1.0: 0.95 as nothing was verified
    close_call = Draft(["a", "b", "c"], confidence=[0.55, 0.95, 0.95])  # bin 0.5-0.6: 0.55
    # Not before one of this answer's own pieces survived: its first drafts are other answers' bets.
    assert answer.verifiable(copy) == 0
    answer.tally([0.95], accepted=1, decided=1)  # a piece held against the target's text: it survived
    assert answer.verifiable(copy) == 3 and answer.verifiable(close_call) == 0
    for _ in range(3):  # this answer's drafts expected at 0.95 kept missing: it trusts them less
        answer.tally([0.95], accepted=0, decided=1)
    assert answer.controller.survival(0.95, answer.trust()) < SURE and answer.verifiable(copy) == 0
