"""The validator's acceptance rules on hand-made target answers: no model, no server.

`_match` (greedy and sample-match) and `_rejection` are fed `Step`s as the client would return them;
`verify` is driven through an in-process stand-in for the server that records what it was asked.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from utils.engine.client import Step, Token
from utils.engine.drafters import Draft
from utils.engine.validator import (
    END,
    MAX_TOP_LOGPROBS,
    PromptPrefixValidator,
    Verdict,
    choose_method,
    options_for_draft,
)
from utils.sampling import GREEDY, SamplingOptions, text_distribution


def step(text: str | None, top: dict[str, float] | None = None, done_reason: str = "length") -> Step:
    """The target's answer at one position: its token (None: it ended the text) and top log-probs."""
    return Step(None if text is None else Token(text, None, top or {}), done_reason, 7)


def logs(probs: dict[str, float]) -> dict[str, float]:
    return {text: math.log(p) for text, p in probs.items()}


# -- choosing a method ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "exact", "method"),
    [
        (GREEDY, True, "greedy"),
        (GREEDY, False, "greedy"),
        (SamplingOptions(temperature=0.7, top_k=20), True, "rejection"),
        (SamplingOptions(temperature=0.7, top_k=1), True, "rejection"),
        (SamplingOptions(temperature=0.7, top_k=21), True, "sample-match"),  # top-20 log-probs are not enough
        (SamplingOptions(temperature=0.7, top_k=0), True, "sample-match"),  # top_k 0: the whole vocabulary
        (SamplingOptions(temperature=0.7, top_k=20), False, "sample-match"),  # lookup, cross-tokenizer drafts
    ],
)
def test_choose_method(options: SamplingOptions, exact: bool, method: str) -> None:
    assert choose_method(options, exact) == method


# -- greedy and sample-match ---------------------------------------------------------------------


def test_match_accepts_the_whole_draft_and_adds_the_bonus_token() -> None:
    draft = Draft(["def", " foo", "("])
    verdict = PromptPrefixValidator._match([step("def"), step(" foo"), step("("), step("x")], draft, [None] * 4)
    assert verdict == Verdict(accepted=3, pieces=[("def", "draft"), (" foo", "draft"), ("(", "draft"), ("x", "bonus")])


def test_match_stops_at_the_first_mismatch_with_the_targets_correction() -> None:
    draft = Draft(["def", " foo", "(", "x"])
    # The target agrees on the first piece only; what it says after a mismatch is never looked at.
    steps = [step("def"), step(" bar"), step("("), step("x"), step(")")]
    verdict = PromptPrefixValidator._match(steps, draft, [None] * 5)
    assert verdict.accepted == 1
    assert verdict.pieces == [("def", "draft"), (" bar", "correction")]
    assert not verdict.ended and verdict.resume_seed is None


def test_match_compares_text_so_a_cross_tokenizer_piece_is_not_accepted_by_a_prefix() -> None:
    draft = Draft(["foobar"])  # the draft's one token is two of the target's
    verdict = PromptPrefixValidator._match([step("foo"), step("bar")], draft, [None, None])
    assert verdict.accepted == 0
    assert verdict.pieces == [("foo", "correction")]


def test_match_first_position_mismatch_emits_only_the_correction() -> None:
    verdict = PromptPrefixValidator._match([step("b"), step("c")], Draft(["a"]), [None, None])
    assert verdict == Verdict(accepted=0, pieces=[("b", "correction")])


def test_match_end_of_text_after_accepted_pieces() -> None:
    draft = Draft(["Hi", "!"])
    steps = [step("Hi"), step("!"), step(None, done_reason="stop")]
    verdict = PromptPrefixValidator._match(steps, draft, [None] * 3)
    assert verdict.accepted == 2
    assert verdict.pieces == [("Hi", "draft"), ("!", "draft")]
    assert verdict.ended


def test_match_end_of_text_instead_of_a_draft_piece() -> None:
    verdict = PromptPrefixValidator._match([step(None, done_reason="stop"), step("x")], Draft(["x"]), [None, None])
    assert verdict == Verdict(accepted=0, pieces=[], ended=True)


def test_match_no_token_for_another_reason_is_not_the_end() -> None:
    # A request cut by the context limit gives no token and done_reason "length": stop, but not "ended".
    verdict = PromptPrefixValidator._match([step("a"), step(None, done_reason="length")], Draft(["a"]), [None, None])
    assert verdict == Verdict(accepted=1, pieces=[("a", "draft")], ended=False)


def test_match_partial_character_hands_over_with_that_positions_seed() -> None:
    draft = Draft(["caf", "é", "!"])
    # The target's token at position 1 is the first byte of a two-byte character: shown as U+FFFD.
    steps = [step("caf"), step("\ufffd"), step("!"), step("?")]
    seeds = [11, 22, 33, 44]
    verdict = PromptPrefixValidator._match(steps, draft, seeds)
    assert verdict.accepted == 1
    assert verdict.pieces == [("caf", "draft")]
    assert verdict.resume_seed == 22  # standard generation draws that position with the same seed
    assert not verdict.ended


def test_match_partial_character_at_the_bonus_position() -> None:
    steps = [step("a"), step("b\ufffd")]
    verdict = PromptPrefixValidator._match(steps, Draft(["a"]), [5, 6])
    assert verdict.pieces == [("a", "draft")] and verdict.resume_seed == 6


def test_match_greedy_has_no_resume_seed() -> None:
    verdict = PromptPrefixValidator._match([step("\ufffd")], Draft([]), [None])
    assert verdict == Verdict(accepted=0, pieces=[], resume_seed=None)


def test_match_empty_draft_gives_the_targets_next_token_as_bonus() -> None:
    verdict = PromptPrefixValidator._match([step("x")], Draft([]), [None])
    assert verdict == Verdict(accepted=0, pieces=[("x", "bonus")])


# -- rejection sampling --------------------------------------------------------------------------

# The target's and the draft's top log-probabilities at the first position. The draft overrates "b",
# underrates "a" and proposes "d", which the target never produces: the residual max(0, p - q) is
# then {a: 0.3, c: 0.2}, not p.
TARGET_TOP = logs({"a": 0.5, "b": 0.3, "c": 0.2})
DRAFT_TOP = logs({"a": 0.2, "b": 0.6, "d": 0.2})
BONUS_TOP = logs({"x": 0.9, "y": 0.1})
OPTION_SETS = [
    SamplingOptions(temperature=1.0, top_k=3, top_p=1.0),
    SamplingOptions(temperature=0.7, top_k=20, top_p=0.9),  # Ollama's top_p default cuts "c" from p
    SamplingOptions(temperature=1.3, top_k=2, top_p=1.0, min_p=0.05),
]


class ScriptedRng:
    """Stands in for numpy's Generator: `random()` returns `u`; `choice` returns `index` and keeps `p`."""

    def __init__(self, u: float, index: int = 0):
        self.u, self.index, self.weights = u, index, None

    def random(self) -> float:
        return self.u

    def choice(self, n: int, p: np.ndarray) -> int:
        self.weights = np.array(p)
        return self.index


def first_position(x: str) -> tuple[list[Step], Draft]:
    return [step("?", TARGET_TOP), step("?", BONUS_TOP)], Draft([x], [DRAFT_TOP])


def emitted_distribution(options: SamplingOptions) -> dict[str, float]:
    """The exact distribution of the first emitted token, by enumeration: the draft proposes x ~ q;
    x is kept when u < a(x) (found by probing u just below and just above the threshold), else the
    residual is drawn (enumerated by letting the scripted draw return each index in turn)."""
    q = text_distribution(DRAFT_TOP, options_for_draft(options, Draft(["a"], [DRAFT_TOP]), 0))
    p = text_distribution(TARGET_TOP, options)
    out: dict[str, float] = {}
    for x, qx in q.items():
        threshold = min(1.0, p.get(x, 0.0) / qx)
        below = PromptPrefixValidator._rejection(*first_position(x), options, ScriptedRng(threshold - 1e-9))
        above_rng = ScriptedRng(threshold + 1e-9 if threshold < 1 else 1.0)
        above = PromptPrefixValidator._rejection(*first_position(x), options, above_rng)
        if threshold > 0:
            assert below.pieces[0] == (x, "draft") and below.accepted == 1
        if threshold < 1:
            assert above.accepted == 0 and above.pieces[0][1] == "correction"
        if threshold > 0:
            out[x] = out.get(x, 0.0) + qx * threshold
        if threshold < 1:
            for index, weight in enumerate(above_rng.weights):
                rng = ScriptedRng(1.0, index)
                verdict = PromptPrefixValidator._rejection(*first_position(x), options, rng)
                text, origin = verdict.pieces[0]
                assert origin == "correction"
                out[text] = out.get(text, 0.0) + qx * (1 - threshold) * weight
    return out


@pytest.mark.parametrize("options", OPTION_SETS, ids=["plain", "top_p", "min_p"])
def test_rejection_keeps_the_targets_distribution_exactly(options: SamplingOptions) -> None:
    p = text_distribution(TARGET_TOP, options)
    emitted = emitted_distribution(options)
    assert set(emitted) <= set(p)  # "d" is never emitted
    for text in p:
        assert emitted.get(text, 0.0) == pytest.approx(p[text], abs=1e-9)


def test_rejection_residual_is_max_of_p_minus_q() -> None:
    options = OPTION_SETS[0]
    rng = ScriptedRng(0.999)  # rejects "b": a(b) = 0.3 / 0.6
    verdict = PromptPrefixValidator._rejection(*first_position("b"), options, rng)
    assert verdict.accepted == 0
    # The residual over p's tokens in p's order (a, b, c): (0.5-0.2, max(0, 0.3-0.6), 0.2-0) / 0.5.
    assert rng.weights == pytest.approx([0.6, 0.0, 0.4])
    assert verdict.pieces == [("a", "correction")]


def test_rejection_accepts_a_draft_token_the_target_likes_more() -> None:
    options = OPTION_SETS[0]
    # p(a) / q(a) = 2.5: accepted whatever u is; then the bonus token comes from the next position.
    verdict = PromptPrefixValidator._rejection(*first_position("a"), options, ScriptedRng(0.999999, index=1))
    assert verdict.accepted == 1
    assert verdict.pieces == [("a", "draft"), ("y", "bonus")]


def test_rejection_never_accepts_what_the_target_cannot_produce() -> None:
    options = OPTION_SETS[0]
    verdict = PromptPrefixValidator._rejection(*first_position("d"), options, ScriptedRng(0.0))
    assert verdict.accepted == 0 and verdict.pieces[0][1] == "correction"


@pytest.mark.parametrize("options", OPTION_SETS, ids=["plain", "top_p", "min_p"])
def test_rejection_seeded_draws_match_the_targets_distribution(options: SamplingOptions) -> None:
    """The whole procedure with numpy's generator: the draft samples x ~ q, the validator decides."""
    draws = 12_000
    rng = np.random.default_rng(1234)
    q = text_distribution(DRAFT_TOP, options_for_draft(options, Draft(["a"], [DRAFT_TOP]), 0))
    q_texts, q_probs = list(q), np.array(list(q.values()))
    counts: dict[str, int] = {}
    for _ in range(draws):
        x = q_texts[int(rng.choice(len(q_texts), p=q_probs))]
        verdict = PromptPrefixValidator._rejection(*first_position(x), options, rng)
        first = verdict.pieces[0][0]
        counts[first] = counts.get(first, 0) + 1
    p = text_distribution(TARGET_TOP, options)
    assert set(counts) <= set(p)
    chi_square = sum((counts.get(t, 0) - draws * pt) ** 2 / (draws * pt) for t, pt in p.items())
    # 99.9% quantiles of chi-square with 1 and 2 degrees of freedom; the seed makes this deterministic.
    assert chi_square < {2: 10.83, 3: 13.82}[len(p)]
    for text, pt in p.items():
        assert abs(counts.get(text, 0) / draws - pt) < 4 * math.sqrt(pt * (1 - pt) / draws) + 1e-12


def test_rejection_end_of_text_as_the_correction() -> None:
    options = OPTION_SETS[0]
    # The target ends the text at position 0: p = {END: 1}, so the draft's "a" is rejected and END drawn.
    steps = [step(None, done_reason="stop"), step("?", BONUS_TOP)]
    verdict = PromptPrefixValidator._rejection(steps, Draft(["a"], [DRAFT_TOP]), options, np.random.default_rng(0))
    assert verdict == Verdict(accepted=0, pieces=[], ended=True)


def test_rejection_end_of_text_as_the_bonus() -> None:
    options = OPTION_SETS[0]
    steps = [step("?", TARGET_TOP), step("?", {END: 0.0})]
    verdict = PromptPrefixValidator._rejection(steps, Draft(["a"], [DRAFT_TOP]), options, ScriptedRng(0.0))
    assert verdict == Verdict(accepted=1, pieces=[("a", "draft")], ended=True)


def test_rejection_no_token_without_end_stops_the_round() -> None:
    options = OPTION_SETS[0]
    steps = [step("?", TARGET_TOP), step(None, done_reason="length")]
    verdict = PromptPrefixValidator._rejection(steps, Draft(["a"], [DRAFT_TOP]), options, ScriptedRng(0.0))
    assert verdict == Verdict(accepted=1, pieces=[("a", "draft")], ended=False)


def test_rejection_partial_character_draw_is_left_to_standard_generation() -> None:
    options = OPTION_SETS[0]
    steps = [step("?", TARGET_TOP), step("?", logs({"\ufffd": 0.7, "z": 0.3}))]
    verdict = PromptPrefixValidator._rejection(steps, Draft(["a"], [DRAFT_TOP]), options, ScriptedRng(0.0, index=0))
    assert verdict == Verdict(accepted=1, pieces=[("a", "draft")])


def test_rejection_when_q_covers_p_the_residual_falls_back_to_p() -> None:
    options = OPTION_SETS[0]
    same = logs({"a": 0.5, "b": 0.3, "c": 0.2})
    # q equals p: every proposal is accepted with probability 1 and the residual would be all zeros.
    rng = ScriptedRng(0.9999999)
    verdict = PromptPrefixValidator._rejection([step("?", same), step("?", BONUS_TOP)], Draft(["c"], [same]), options,
                                               rng)
    assert verdict.accepted == 1 and verdict.pieces[0] == ("c", "draft")


def test_options_for_draft_limits_top_k_to_what_the_draft_reported() -> None:
    options = SamplingOptions(temperature=0.6, top_k=20, top_p=0.8, min_p=0.1, seed=3)
    draft = Draft(["a", "b"], [logs({"a": 0.6, "b": 0.4}), {}])
    assert options_for_draft(options, draft, 0) == SamplingOptions(0.6, 2, 0.8, 0.1)
    assert options_for_draft(options, draft, 1).top_k == 1  # nothing reported: the drafted piece alone


# -- verify: what is asked of the server ----------------------------------------------------------


class RecordingServer:
    """An in-process stand-in for OllamaClient.next_token: answers from a table, records every call."""

    def __init__(self, answers: dict[str, Step]):
        self.answers, self.calls, self.bursts = answers, [], []

    async def next_tokens(self, model: str, prompts: list[str], options: list[dict],
                          top_logprobs: int = 0, format: object = None) -> list[Step]:
        assert format is None  # these drafts carry no grammar
        self.bursts.append(len(prompts))
        self.calls.extend((model, prompt, each, top_logprobs) for prompt, each in zip(prompts, options))
        return [self.answers[prompt] for prompt in prompts]


async def test_verify_greedy_sends_every_prefix_and_counts_the_prompt() -> None:
    server = RecordingServer({"ctx": step("A"), "ctxA": step("B"), "ctxAX": step("C")})
    validator = PromptPrefixValidator(server, "target")
    verdict = await validator.verify("ctx", Draft(["A", "X"]), GREEDY, "greedy", np.random.default_rng(0),
                                     {"num_ctx": 2048})
    # The client's own options go with every request (a num_ctx only because the client sent one).
    assert server.calls == [("target", prompt, {"num_ctx": 2048, "temperature": 0}, 0)
                            for prompt in ("ctx", "ctxA", "ctxAX")]
    assert verdict == Verdict(accepted=1, pieces=[("A", "draft"), ("B", "correction")], prompt_tokens=7)
    assert server.bursts == [3]  # one burst of three, which the server may evaluate together


async def test_verify_sample_match_gives_each_position_its_own_seed() -> None:
    server = RecordingServer({"c": step("A"), "cA": step("\ufffd"), "cAB": step("C")})
    options = SamplingOptions(temperature=0.8, top_k=40, top_p=0.9, min_p=0.0, seed=99)
    sent = {"temperature": 0.8, "seed": 99}  # what the client sent; upstream adds the model's parameters
    verdict = await PromptPrefixValidator(server, "t").verify("c", Draft(["A", "B"]), options, "sample-match",
                                                              np.random.default_rng(5), sent)
    seeds = [int(s) for s in np.random.default_rng(5).integers(0, 2**31 - 1, size=3)]
    # The answer's own seed is not sent: each position has its own. Nothing is added to the client's
    # options (no top_k, top_p, min_p or num_ctx of the engine's), so upstream samples as asked directly.
    base = {"temperature": 0.8}
    assert server.calls == [("t", prompt, {**base, "seed": seed}, 0)
                            for prompt, seed in zip(["c", "cA", "cAB"], seeds, strict=True)]
    assert len(set(seeds)) == 3
    assert verdict == Verdict(accepted=1, pieces=[("A", "draft")], prompt_tokens=7, resume_seed=seeds[1])


async def test_verify_rejection_asks_greedy_requests_for_the_top_log_probabilities() -> None:
    server = RecordingServer({"c": step("?", TARGET_TOP), "ca": step("?", BONUS_TOP)})
    options = OPTION_SETS[0]
    verdict = await PromptPrefixValidator(server, "t").verify("c", Draft(["a"], [DRAFT_TOP]), options, "rejection",
                                                              np.random.default_rng(0), {"top_k": options.top_k})
    greedy = {"top_k": options.top_k, "temperature": 0}
    assert server.calls == [("t", prompt, greedy, MAX_TOP_LOGPROBS) for prompt in ("c", "ca")]
    assert verdict.accepted == 1  # p(a) > q(a): always kept
    assert verdict.pieces[0] == ("a", "draft") and verdict.pieces[1][1] == "bonus"
