"""Sampling: Ollama's order (top-k, temperature, top-p, min-p) on tiny arrays, and the options' checks."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from utils.sampling import GREEDY, SamplingOptions, distribution, log_sum_exp, sample, text_distribution

PROBS = [0.5, 0.25, 0.15, 0.1]
LOGPROBS = np.log(PROBS)


def options(**kwargs) -> SamplingOptions:
    return SamplingOptions(**{"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, **kwargs})


def check(values: np.ndarray, opts: SamplingOptions, indices: list[int], probs: list[float]) -> None:
    got_indices, got_probs = distribution(values, opts)
    assert got_indices.tolist() == indices
    assert got_probs.tolist() == pytest.approx(probs)


def test_nothing_cut_at_temperature_one() -> None:
    check(LOGPROBS, options(), [0, 1, 2, 3], PROBS)


def test_indices_come_most_likely_first() -> None:
    check(np.log([0.1, 0.5, 0.15, 0.25]), options(), [1, 3, 2, 0], [0.5, 0.25, 0.15, 0.1])


def test_top_k() -> None:
    check(LOGPROBS, options(top_k=2), [0, 1], [2 / 3, 1 / 3])
    check(LOGPROBS, options(top_k=4), [0, 1, 2, 3], PROBS)  # top_k >= vocabulary: no cut
    check(np.array([2.0, 1.0, 0.0, -1.0]), options(top_k=2), [0, 1], [math.e / (math.e + 1), 1 / (math.e + 1)])


def test_temperature() -> None:
    squares = [p * p for p in PROBS]
    check(LOGPROBS, options(temperature=0.5), [0, 1, 2, 3], [s / sum(squares) for s in squares])


def test_top_p_keeps_the_smallest_set_that_reaches_it() -> None:
    check(LOGPROBS, options(top_p=0.7), [0, 1], [2 / 3, 1 / 3])  # 0.5 < 0.7 <= 0.75
    check(LOGPROBS, options(top_p=0.8), [0, 1, 2], [0.5 / 0.9, 0.25 / 0.9, 0.15 / 0.9])
    check(LOGPROBS, options(top_p=0.3), [0], [1.0])


def test_top_p_comes_after_temperature() -> None:
    # At temperature 0.5 the first token alone has 0.25 / 0.345 = 0.725 of the mass: top_p 0.7 keeps it only.
    check(LOGPROBS, options(temperature=0.5, top_p=0.7), [0], [1.0])


def test_min_p_is_relative_to_the_most_likely_token() -> None:
    check(LOGPROBS, options(min_p=0.4), [0, 1], [2 / 3, 1 / 3])  # keeps p >= 0.2
    check(LOGPROBS, options(min_p=0.25), [0, 1, 2], [0.5 / 0.9, 0.25 / 0.9, 0.15 / 0.9])  # p >= 0.125
    check(LOGPROBS, options(min_p=1.0), [0], [1.0])


def test_all_four_in_order() -> None:
    values = np.log([0.05, 0.4, 0.3, 0.2, 0.05])
    # top_k 4 leaves 0.4, 0.3, 0.2, 0.05 (renormalized by 0.95); top_p 0.9 keeps the first three
    # (cumulative 0.42, 0.74, 0.95); min_p 0.6 keeps p >= 0.6 * 0.4 / 0.9, which drops 0.2.
    check(values, options(top_k=4, top_p=0.9, min_p=0.6), [1, 2], [4 / 7, 3 / 7])
    # Without top-k, top_p 0.85 alone (cumulative 0.4, 0.7, 0.9) keeps three tokens.
    check(values, options(top_p=0.85), [1, 2, 3], [4 / 9, 3 / 9, 2 / 9])


def test_a_tiny_temperature_does_not_overflow() -> None:
    check(np.array([1000.0, 999.0, -1000.0]), options(temperature=1e-6), [0, 1, 2], [1.0, 0.0, 0.0])


def test_sample() -> None:
    assert sample(np.array([0.1, 3.0, 2.9]), GREEDY, np.random.default_rng(0)) == 1
    assert sample(LOGPROBS, options(top_k=1), np.random.default_rng(0)) == 0
    draws = [sample(LOGPROBS, options(top_k=2), np.random.default_rng(seed)) for seed in range(200)]
    assert set(draws) == {0, 1}
    again = [sample(LOGPROBS, options(top_k=2), np.random.default_rng(seed)) for seed in range(200)]
    assert draws == again  # the seed decides


def test_text_distribution() -> None:
    top = {"a": math.log(0.5), "b": math.log(0.3), "c": math.log(0.2)}
    assert text_distribution(top, GREEDY) == {"a": 1.0}
    assert text_distribution({}, options()) == {}
    got = text_distribution(top, options(top_k=2))
    assert list(got) == ["a", "b"] and got["a"] == pytest.approx(0.625) and got["b"] == pytest.approx(0.375)
    assert sum(text_distribution(top, options(temperature=0.7, top_p=0.9)).values()) == pytest.approx(1.0)


def test_log_sum_exp() -> None:
    assert log_sum_exp(np.log(np.array([0.2, 0.3, 0.5]))) == pytest.approx(0.0, abs=1e-12)
    assert log_sum_exp(np.array([1000.0, 1000.0])) == pytest.approx(1000.0 + math.log(2))


def test_defaults_and_to_ollama() -> None:
    assert SamplingOptions().to_ollama() == {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "min_p": 0.0}
    assert SamplingOptions(temperature=0.2, top_k=5, top_p=0.5, min_p=0.1, seed=7).to_ollama() == {
        "temperature": 0.2, "top_k": 5, "top_p": 0.5, "min_p": 0.1, "seed": 7
    }
    assert SamplingOptions(seed=0).to_ollama()["seed"] == 0  # seed 0 is a seed
    assert GREEDY.greedy and GREEDY.temperature == 0.0
    assert not SamplingOptions(temperature=0.01).greedy


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.1}, "temperature must be 0 or more"),
        ({"temperature": math.inf}, "temperature must be 0 or more"),
        ({"temperature": math.nan}, "temperature must be 0 or more"),
        ({"top_k": -1}, "top_k must be 0 or more"),
        ({"top_p": 1.5}, "top_p must be between 0 and 1"),
        ({"top_p": -0.1}, "top_p must be between 0 and 1"),
        ({"min_p": 2.0}, "min_p must be between 0 and 1"),
        ({"temperature": -1, "min_p": -1}, "temperature must be 0 or more; min_p must be between 0 and 1"),
    ],
)
def test_invalid_options_are_refused_with_every_reason(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as error:
        SamplingOptions(**kwargs)
    assert str(error.value) == message


def test_options_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        GREEDY.temperature = 1.0  # type: ignore[misc]
