"""The controller under load (issue 54): costs measured per number of other answers in progress, each
round charged what its burst delays them, so that K goes to 0 where bursts cost the server more than
they save at that concurrency, and stays where they pay. Hand-set costs, no model."""

from __future__ import annotations

import pytest

from utils.engine.controller import MAX_LOAD, Adaptive, DraftLengthController, FixedK, FreeDrafts, LoadLevels
from utils.engine.cost_model import CostModel

ALONE = 0.05  # a standard token's seconds with no other answer in the decode
CROWDED = 0.08  # ... with three others in it (four rows a decode on a 2-core CPU)


def learned(controller: DraftLengthController, others: int, standard: float, burst: float) -> None:
    """Standard segments and sure K = 4 rounds measured at a load: `burst` seconds to verify four pieces."""
    controller.seen(others)
    controller.record_standard(tokens=17, seconds=16 * standard)
    for _ in range(6):  # drafts that survive: what they are worth is known at any load
        controller.record_round(k=4, drafted=4, accepted=4, draft_seconds=0.0, verify_seconds=burst)


def test_where_bursts_cost_the_others_more_than_they_save_k_goes_to_zero_and_stays_where_alone() -> None:
    controller = Adaptive(k_max=4)
    learned(controller, 0, ALONE, burst=0.075)  # alone: a K = 4 burst is 1.5 standard tokens
    # Four rows per decode on a CPU that computes each: the burst takes twice a standard step, which
    # alone would still pay (up to 5 tokens for 2 steps), but each of the three others waits a step too.
    learned(controller, 3, CROWDED, burst=0.16)
    assert controller.cost.others == 3 and controller.cost.crowding(4) == pytest.approx(0.08)
    assert controller.speculative_rate(4) * CROWDED < 1  # the server as a whole loses
    assert controller.choose() == 0
    assert controller.cut([0.99] * 4) == 0
    assert not controller.can_pay()

    controller.seen(0)  # the others ended: this load's own costs, where the same drafts pay
    assert controller.cost.standard_seconds_per_token == pytest.approx(ALONE)
    assert controller.choose() == 4
    assert controller.cut([0.99] * 4) == 4


def test_where_bursts_barely_slow_the_decode_drafts_stay_under_load() -> None:
    controller = Adaptive(k_max=4)
    learned(controller, 3, CROWDED, burst=0.085)  # rows nearly free (a memory-bound decode): others wait 5 ms
    assert controller.choose() == 4
    assert controller.can_pay()


def test_a_free_drafter_verifies_nothing_at_a_load_where_no_burst_pays() -> None:
    controller = FreeDrafts(k_max=8)
    learned(controller, 0, ALONE, burst=0.075)
    learned(controller, 3, CROWDED, burst=0.16)
    assert controller.cut([0.99] * 4) == 0
    assert controller.skips()  # whole answers go standard at this load ...
    controller.seen(0)
    assert controller.cut([0.99] * 4) == 4 and not controller.skips()  # ... not alone


def test_a_new_load_measures_the_standard_speed_first() -> None:
    controller = Adaptive(k_max=4)
    learned(controller, 0, ALONE, burst=0.075)
    controller.seen(2)  # nothing measured with two others yet
    assert controller.cost.standard_seconds_per_token is None and controller.choose() == 0
    controller.record_standard(tokens=17, seconds=16 * 0.06)
    assert controller.choose() > 0  # the optimistic prior: tried, then measured


def test_a_round_under_load_is_charged_each_others_wait() -> None:
    controller = Adaptive(k_max=4)
    learned(controller, 3, CROWDED, burst=0.16)
    alone = CostModel(standard_seconds_per_token=CROWDED, verify_seconds={4: 0.16})
    # What the loss budget and `can_pay` read too (budget.py): a round's loss includes the others' wait.
    assert controller.cost.round_seconds(4) == pytest.approx(alone.round_seconds(4) + 3 * 0.08)


def test_loads_beyond_the_highest_level_share_its_costs() -> None:
    controller = Adaptive(k_max=4)
    controller.seen(MAX_LOAD + 5)
    assert controller.cost.others == MAX_LOAD


def test_the_do_nothing_policy_keeps_one_cost_model_whatever_the_load() -> None:
    controller = Adaptive(k_max=4, load=LoadLevels())
    learned(controller, 0, ALONE, burst=0.075)
    controller.seen(3)
    assert controller.cost.others == 0 and controller.choose() == 4
    fixed = FixedK(k_max=8, k=4)  # verified whatever it costs, under any load
    fixed.seen(3)
    assert fixed.cost.others == 0 and fixed.choose() == 4
