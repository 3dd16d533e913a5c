"""The Compare, Models and Benchmarks pages (AppTest): both answers side by side, the pair advisor,
a tiny benchmark; and the verdicts they draw from stored measurements."""

from __future__ import annotations

import re

from streamlit.testing.v1 import AppTest

from tests.support.app import REPEAT_PROMPT, open_app, short_answers
from tests.support.models import SMALL
from utils.app.benchmarks import SPEEDUP_MEANING
from utils.app.highlight import DRAFT_COLOUR


def test_compare_runs_both_side_by_side(data_dir):
    at = open_app("pages/compare.py")
    short_answers(at, speculative=True)
    at.text_area(key="compare_prompt").set_value(REPEAT_PROMPT)
    at.button[0].click().run()
    assert not at.exception, at.exception
    assert [h.value for h in at.subheader][:2] == ["Standard", "Speculative (lookup)"]
    columns = at.columns[:2]
    for column in columns:  # each answer drawn highlighted (HTML), the speculative one's draft text on green
        assert "".join(h.proto.body for h in column.html).strip(), "each column shows its answer"
    assert DRAFT_COLOUR in "".join(h.proto.body for h in columns[1].html)
    assert DRAFT_COLOUR not in "".join(h.proto.body for h in columns[0].html)
    verdicts = [s.value for s in at.success] + [w.value for w in at.warning]
    assert any("identical" in v or "differ" in v for v in verdicts)
    assert [m.label for m in at.metric][-1] == "Speed-up, first ask"  # lookup remembers no answer: all first asks
    assert all(p["ask"] == "first ask" for p in at.session_state.comparison["pairs"])
    assert at.session_state.comparison["order"] == ["standard", "speculative"]
    # Three pairs (the default): the one shown, then two timed only, each in the other order.
    pairs = at.session_state.comparison["pairs"]
    assert [p["order"][0] for p in pairs] == ["standard", "speculative", "standard"]
    assert all(p["standard"].mode == "standard" and p["speculative"].drafter == "lookup" for p in pairs)

    at.number_input(key="compare_repeats").set_value(1)
    at.button[0].click().run()  # the next run starts with the other one
    assert not at.exception, at.exception
    assert at.session_state.comparison["order"] == ["speculative", "standard"]
    assert [c.value for c in at.caption if c.value.startswith("ran")][:2] == ["ran second", "ran first"]


def test_compare_shows_no_speedup_where_nothing_was_drafted():
    def page():  # AppTest runs this function's source alone: it imports what it uses
        from tests.support.app import speculative_stats
        from utils.app.compare import show_comparison
        from utils.engine.stats import AnswerStats

        standard = AnswerStats(mode="standard", target="m", output_tokens=127, tokens_per_second=20.0,
                               time_to_first_token_s=0.2)
        speculative = speculative_stats(127, 0, 0, [0] * 10, tokens_per_second=24.0, time_to_first_token_s=0.2)
        show_comparison({"order": ["standard", "speculative"], "temperature": 0.0,
                         "standard": {"text": "a", "pieces": [["a", "standard"]], "stats": standard, "note": None},
                         "speculative": {"text": "a", "pieces": [["a", "standard"]], "stats": speculative,
                                         "note": None}})

    at = AppTest.from_function(page, default_timeout=60).run()
    assert not at.exception, at.exception
    assert at.metric[-1].label == "Speed-up" and at.metric[-1].value == "—"
    assert ("No speed-up shown: drafted 0 of 127 tokens: the controller found drafting did not pay here"
            in at.info[0].value)


def test_compare_shows_the_median_and_spread_of_its_pairs_and_says_within_noise():
    def page():  # AppTest runs this function's source alone: it imports what it uses
        from tests.support.app import speculative_stats
        from utils.app.compare import show_comparison
        from utils.engine.stats import AnswerStats

        def standard(tps: float) -> AnswerStats:
            return AnswerStats(mode="standard", target="m", output_tokens=100, tokens_per_second=tps,
                               time_to_first_token_s=0.2)

        def drafted(tps: float) -> AnswerStats:
            return speculative_stats(100, 80, 60, [4] * 20, tokens_per_second=tps, time_to_first_token_s=0.1)

        orders = [["standard", "speculative"], ["speculative", "standard"], ["standard", "speculative"]]
        pairs = [{"order": o, "standard": standard(20.0), "speculative": drafted(tps)}
                 for o, tps in zip(orders, (26.0, 18.0, 24.0), strict=True)]
        show_comparison({"order": orders[0], "temperature": 0.0, "pairs": pairs,
                         "standard": {"text": "a", "pieces": [], "stats": pairs[0]["standard"], "note": None},
                         "speculative": {"text": "a", "pieces": [], "stats": pairs[0]["speculative"], "note": None}})

    at = AppTest.from_function(page, default_timeout=60).run()
    assert not at.exception, at.exception
    # The pairs' range (×0.90 – ×1.30) holds ×1.00: no headline figure, the median and range as detail.
    assert at.metric[-1].value == "—"
    captions = " ".join(c.value for c in at.caption)
    assert ("Speed-up over 3 pairs, each side first as often as second: median ×1.20, range ×0.90 – ×1.30 — within "
            "noise" in captions)
    # The tokens/s are the pairs' medians; the first pair's (shown above) are detail.
    assert at.metric[2].value == "20.0 → 24.0"
    assert "First pair (the texts above): 20.0 → 26.0 tokens/s, standard → speculative, a first ask." in captions


def test_compare_headline_is_the_first_ask_and_repeats_are_shown_apart():
    """Issue 52: a first ask (no faster) and two repeats the suffix drafter copied (×2.3, ×2.5)."""
    def page():  # AppTest runs this function's source alone: it imports what it uses
        from tests.support.app import speculative_stats
        from utils.app.compare import show_comparison
        from utils.engine.stats import AnswerStats

        standard = AnswerStats(mode="standard", target="m", output_tokens=100, tokens_per_second=10.0)
        pairs = [{"order": ["standard", "speculative"], "standard": standard, "ask": ask,
                  "speculative": speculative_stats(100, 80, 60, [4] * 20, tokens_per_second=tps, drafter="suffix")}
                 for ask, tps in (("first ask", 10.2), ("asked again", 23.0), ("asked again", 25.0))]
        show_comparison({"order": pairs[0]["order"], "temperature": 0.0, "pairs": pairs, "drafter": "suffix",
                         "standard": {"text": "a", "pieces": [], "stats": standard, "note": None},
                         "speculative": {"text": "a", "pieces": [], "stats": pairs[0]["speculative"],
                                         "note": "The answer stopped at Max tokens (100)"}})

    at = AppTest.from_function(page, default_timeout=60).run()
    assert not at.exception, at.exception
    assert (at.metric[-1].label, at.metric[-1].value) == ("Speed-up, first ask", "×1.02")
    # Tokens/s is the first ask's too (it was 10.0 → 23.0, the median with the repeats); theirs apart.
    assert (at.metric[-2].label, at.metric[-2].value) == ("Tokens/s, first ask", "10.0 → 10.2")
    captions = " ".join(c.value for c in at.caption)
    assert ("First ask ×1.02 (1 pair): standard against speculative on this prompt asked for the first time "
            "(suffix had not seen an answer to it)") in captions
    assert "Asked again ×2.40 (2 pairs, median, range ×2.30 – ×2.50): the same prompt asked again" in captions
    assert "Tokens/s, asked again: 10.0 → 24.0 standard → speculative, the median over 2 pairs" in captions
    assert [w.value for w in at.warning if "Max tokens" in w.value] and not at.error  # a note, not an error


def test_models_lists_installed_models_with_sizes(data_dir):
    at = open_app("pages/models.py")
    table = at.table[0].value  # shown whole, every column (a dataframe cut them)
    assert table.loc[SMALL]["size (MB)"] > 50


def test_models_pair_advisor_measures_and_recommends(data_dir):
    at = open_app("pages/models.py")
    at.multiselect(key="advisor_drafters").set_value(["lookup"])
    at.slider(key="advisor_prompts").set_value(1)
    at.number_input(key="advisor_tokens").set_value(12)
    at.button[0].click().run()
    assert not at.exception, at.exception
    table = at.table[1].value
    assert list(table.index) == ["none", "lookup"]
    assert (table["tokens/s"] > 0).all()
    assert bool(table["same text as standard"].iloc[1]), "greedy speculation must not change the text"
    advice = at.session_state.advice
    assert len(advice.candidates[0].ratios) == 2  # one prompt, two interleaved passes
    assert table["speed-up (median)"].iloc[1].startswith("×") and "×" in table["spread (25–75%)"].iloc[1]
    verdict = (at.success or at.info)[0].value
    assert verdict.startswith(f"Recommendation for {SMALL}")
    # What the figures compare, said under the table; lookup remembers no answer: no pass is a repeat.
    [meaning] = [c.value for c in at.caption if c.value.startswith("tokens/s: all of a drafter's answers")]
    assert "over standard generation's on the same prompt" in meaning and "asked again" not in meaning
    if advice.recommended == "none":
        assert "no speculation" in verdict
    else:
        assert advice.recommended == "lookup"
        assert advice.candidates[0].tokens_per_second > advice.standard.tokens_per_second


def test_advisor_recommends_only_a_draft_faster_beyond_noise():
    from utils.bench.advisor import Measurement, _recommend

    standard = Measurement("none", "standard", tokens_per_second=20.0)
    lucky = Measurement("lookup", "lookup", tokens_per_second=22.0, drafted_tokens=30, ratios=[0.95, 1.3, 1.1, 0.9])
    recommended, reason = _recommend(standard, [lucky])
    assert recommended == "none" and "within noise (×0.94 – ×1.15 over 4 runs)" in reason
    steady = Measurement("lookup", "lookup", tokens_per_second=26.0, drafted_tokens=30, ratios=[1.2, 1.3, 1.25, 1.4])
    recommended, reason = _recommend(standard, [lucky, steady])
    assert recommended == "lookup" and "median ×1.27" in reason
    idle = Measurement("lookup", "lookup", tokens_per_second=30.0, ratios=[1.5, 1.5])  # drafted nothing
    assert _recommend(standard, [idle])[0] == "none"


def test_advisor_never_recommends_a_draft_that_drafted_nothing():
    from utils.app.models import advice_table, honest_advice
    from utils.bench.advisor import Advice, Measurement

    standard = Measurement("none", "standard", tokens_per_second=20.0, output_tokens=96)
    idle = Measurement("lookup", "lookup", tokens_per_second=21.0, output_tokens=96, identical=True)  # drafted nothing
    slow = Measurement("qwen2.5-coder:0.5b", "cross", tokens_per_second=15.0, output_tokens=96, acceptance_rate=0.5,
                       mean_acceptance_length=2.0, identical=True)
    advice = honest_advice(Advice(SMALL, standard, [idle, slow], recommended="lookup", reason="lookup: 21.0 tokens/s"))
    assert advice.recommended == "none"
    assert "lookup drafted nothing on these prompts" in advice.reason
    assert [row["problem"] for row in advice_table(advice)] == ["", "drafted nothing", ""]

    fast = Measurement("qwen2.5-coder:0.5b", "cross", tokens_per_second=30.0, output_tokens=96, acceptance_rate=0.7,
                       mean_acceptance_length=3.0, identical=True)
    advice = honest_advice(Advice(SMALL, standard, [idle, fast], recommended="lookup", reason="lookup: 21.0 tokens/s"))
    assert advice.recommended == "qwen2.5-coder:0.5b" and "×1.50" in advice.reason


def test_benchmarks_page_runs_a_tiny_benchmark(data_dir):
    at = open_app("pages/benchmarks.py")
    categories = at.multiselect(key="bench_categories-prompts/bench.jsonl")  # keyed by its prompt set
    assert len(categories.options) > 1
    categories.set_value([categories.options[0]])
    at.multiselect(key="bench_drafters").set_value(["lookup"])
    assert at.number_input(key="bench_limit").value == 1 and at.number_input(key="bench_repeat").value == 2
    at.number_input(key="bench_repeat").set_value(1)
    at.number_input(key="bench_max_tokens").set_value(8).run()
    # Before it runs: its size, and no time estimate until a standard speed was measured.
    [size] = [i.value for i in at.info]
    assert size.startswith("2 answers (2 configurations, standard generation included, × 1 repeat), up to 16 tokens")
    assert "measure it (below) for a time estimate" in size
    at.button(key="bench_measure").click().run()  # one short standard answer: then a time estimate
    assert not at.exception, at.exception
    [size] = [i.value for i in at.info]
    assert re.search(r"up to 16 tokens: at most about \d+ s at \d+\.\d tokens/s, \S+'s standard speed, measured "
                     r"on this server on [\d-]+ [\d:]+ \(every answer as slow as that, at its token limit\)\.$",
                     size), size
    assert not [b for b in at.button if b.key == "bench_measure"]
    at.button(key="bench_start").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert at.get("plotly_chart")
    # Every figure says what it compares: the speed-ups and verdicts, and the first asks (the `asked` column).
    captions = [c.value for c in at.caption]
    assert SPEEDUP_MEANING in captions and any(c.startswith("Every speed-up here is of first asks") for c in captions)
    table = at.dataframe[0].value
    assert len(table) >= 1
    assert set(table["verdict"]) <= {"nothing drafted", "one run: no spread"}
    assert all(value == "—" or value.startswith("×") for value in table["speed-up (median)"])
    assert any(s.value.startswith("Benchmark saved in") for s in at.success)

    # Past runs stay listed in a new session.
    reloaded = open_app("pages/benchmarks.py")
    [run] = [s for s in reloaded.selectbox if s.label == "Run"]
    assert len(run.options) == 1 and reloaded.get("plotly_chart")
