"""The adaptive draft-length controller's bookkeeping, fed with measurements directly."""

from __future__ import annotations

from utils.engine.controller import PROBE_EVERY, DraftLengthController


def test_an_empty_draft_is_a_probe_that_did_not_pay():
    controller = DraftLengthController(k_max=4)
    controller.record_standard(tokens=17, seconds=16 * 0.05)  # 50 ms a standard token
    # Prompt lookup found nothing: no time spent, nothing verified. It must not look like a win.
    controller.record_round(k=4, drafted=0, accepted=0, draft_seconds=0.0001, verify_seconds=0.0)
    assert controller.probe_every == 2 * PROBE_EVERY
    controller.record_round(k=4, drafted=0, accepted=0, draft_seconds=0.0001, verify_seconds=0.0)
    assert controller.probe_every == 4 * PROBE_EVERY
    # A draft that pays (5 tokens in 70 ms against 50 ms a token) brings frequent probes back.
    controller.record_round(k=4, drafted=4, accepted=4, draft_seconds=0.01, verify_seconds=0.06)
    assert controller.probe_every == PROBE_EVERY
