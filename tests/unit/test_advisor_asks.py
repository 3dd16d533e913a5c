"""The pair advisor's figures for a drafter that remembers answers (issue 52): suffix decoding copies its
first-pass answers on every later pass, so its speed-up is of the first pass alone, the repeats apart."""

from __future__ import annotations

from utils.app.models import advice_meaning, advice_table
from utils.bench.advisor import Advice, Measurement, _recommend

STANDARD = Measurement("none", "standard", tokens_per_second=10.0, output_tokens=96)


def measured(drafter: str, passes: list[list[float]], **fields) -> Measurement:
    """`drafter`'s measurement after the advisor's passes, one list of ratios (one per prompt) a pass."""
    measurement = Measurement(drafter, drafter, tokens_per_second=12.0, output_tokens=96, drafted_tokens=40,
                              acceptance_rate=0.5, mean_acceptance_length=2.0, identical=True, **fields)
    for repeat, ratios in enumerate(passes):
        for ratio in ratios:
            measurement.add_ratio(ratio, repeat)
    return measurement


def test_a_drafter_that_remembers_answers_is_measured_on_its_first_pass_alone():
    # The figures: no faster on a first ask, ×2.2 – ×2.4 once it copies its earlier answers.
    suffix = measured("suffix", [[1.1, 1.2, 1.15], [2.2, 2.4, 2.3], [2.3, 2.4, 2.2]])
    assert suffix.ratios == [1.1, 1.2, 1.15] and suffix.again_ratios == [2.2, 2.4, 2.3, 2.3, 2.4, 2.2]
    assert suffix.speedup == 1.15  # the median over every pass was ×2.2
    assert suffix.first_ask(0) and not suffix.first_ask(1)
    # Lookup remembers nothing: every pass is a first ask, every ratio counts.
    lookup = measured("lookup", [[1.1, 1.2], [1.3, 1.25]])
    assert lookup.ratios == [1.1, 1.2, 1.3, 1.25] and not lookup.again_ratios and lookup.first_ask(3)


def test_the_table_caption_and_recommendation_say_the_repeats_are_apart():
    suffix = measured("suffix", [[1.3, 1.4, 1.35], [2.2, 2.4, 2.3]])
    advice = Advice("t", STANDARD, [suffix, measured("lookup", [[1.1], [1.2]])], repeats=2)
    _, suffix_row, lookup_row = advice_table(advice)
    assert suffix_row["speed-up (median)"] == "×1.35" and suffix_row["asked again (median)"] == "×2.30"
    assert lookup_row["speed-up (median)"] == "×1.15" and lookup_row["asked again (median)"] is None
    meaning = advice_meaning(advice)
    assert ("suffix remembers its answers: from the second pass on it is asked again and copies its first "
            "answer") in meaning
    assert "its tokens/s, speed-up and spread are of the first pass alone, its first asks" in meaning
    assert "\"asked again\" column, apart" in meaning
    recommended, reason = _recommend(STANDARD, [suffix])
    assert recommended == "suffix" and reason.startswith("suffix: median ×1.35") and "first asks only" in reason
