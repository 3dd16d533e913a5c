"""The app's defaults and figures, without a server (issue 44): the drafter each model gets by default,
which speed-ups are figures and which are noise, the Compare headline, the notes under answers, the
conversation a reload reopens, and a thinking answer's reasoning kept highlighted (issue 42)."""

from __future__ import annotations

from config import Settings
from utils.app.answer_view import length_note
from utils.app.benchmarks import measured, speedup_figure, summary_markdown, summary_table, verdict
from utils.app.compare import Headline, more_pairs_skipped, speedups
from utils.app.conversations import address_conversation
from utils.app.highlight import DRAFT_SPAN, pieces_html
from utils.app.sidebar import default_drafter
from utils.app.speed import no_speedup_reason, speedup_so_far
from utils.app.store import ConversationStore, stats_summary
from utils.engine.stats import AnswerStats, Fallback, RoundRecord

DRAFT = "qwen2.5-coder:0.5b"
USABLE = ["lookup", "suffix", DRAFT]


def row(**changes) -> dict:
    base = {"category": "code", "engine": "project", "drafter": "suffix", "k": "auto", "runs": 4,
            "standard_tps": 20.0, "speculative_tps": 30.0, "speedup": 1.5, "speedup_p25": 1.3,
            "speedup_p75": 1.7, "drafted": 80, "acceptance": 0.6, "identical_rate": 1.0}
    return {**base, **changes}


def stats(**changes) -> AnswerStats:
    base = {"mode": "speculative", "target": "t", "drafter": "suffix", "output_tokens": 100, "drafted_tokens": 50,
            "tokens_per_second": 10.0, "done_reason": "stop"}
    return AnswerStats(**{**base, **changes})


# -- 1. defaults that pay ------------------------------------------------------------------------------------


def test_the_default_drafter_is_what_serve_pairs_the_model_with():
    # No pairs configured: suffix decoding, as `cli.py serve` gives every model; not the draft model
    # the settings name (it was the default before, and did not pay on a CPU).
    assert default_drafter(Settings(draft_model=DRAFT), "qwen2.5-coder:1.5b", USABLE) == "suffix"
    # SPEC_PAIRS pairs a model with a draft model: that one, for that model only.
    paired = Settings(pairs=f"qwen2.5-coder:1.5b={DRAFT}, smollm2:135m=lookup")
    assert default_drafter(paired, "qwen2.5-coder:1.5b", USABLE) == DRAFT
    assert default_drafter(paired, "smollm2:135m", USABLE) == "lookup"
    assert default_drafter(paired, "other:1b", USABLE) == "suffix"
    # A pair that cannot draft here (not on this server, unusable), or pairs that do not parse: suffix.
    assert default_drafter(paired, "qwen2.5-coder:1.5b", ["lookup", "suffix"]) == "suffix"
    assert default_drafter(Settings(pairs="no-equals-sign"), "qwen2.5-coder:1.5b", USABLE) == "suffix"


# -- 2. figures that are true ---------------------------------------------------------------------------------


def test_a_speedup_is_a_figure_only_beyond_noise_and_with_something_drafted():
    assert [verdict(r) for r in (row(), row(speedup=0.8, speedup_p25=0.7, speedup_p75=0.9),
                                  row(speedup_p25=0.98), row(runs=1), row(drafted=0, speedup=1.13))] == \
        ["faster", "slower", "within noise", "one run: no spread", "nothing drafted"]
    within_noise, idle = summary_table([row(speedup_p25=0.98, speedup=1.08), row(drafted=0, speedup=1.13)])
    assert within_noise["speed-up (median)"] == "—" and within_noise["spread (25–75%)"] == "×0.98 – ×1.70"
    assert idle["speed-up (median)"] == "—" and not measured(row(drafted=0))


def test_the_speedup_chart_draws_only_measured_rows_and_says_why_for_the_others():
    rows = [row(), row(category="chat", drafted=0, speedup=1.13), row(category="edit", speedup_p25=0.97),
            row(category="all")]
    figure, left_out = speedup_figure(rows)
    assert figure is not None
    [bars] = figure.data
    assert list(bars.x) == ["code"] and list(bars.y) == [1.5]
    assert left_out == ["chat, suffix, K auto: nothing drafted", "edit, suffix, K auto: within noise"]
    # Nothing measured anywhere (the run: x1.13, x1.08, x1.03 with nothing drafted): no chart.
    assert speedup_figure([row(drafted=0, speedup=1.13), row(category="chat", drafted=0, speedup=1.08)])[0] is None


def test_the_downloaded_summary_has_the_header_and_no_speedup_where_nothing_was_drafted():
    run = {"report_md": "# Benchmark: t\n\n- Machine: x, 2 cores\n\n## code\n\n| ... 1.13x ... |\n",
           "summary": [row(drafted=0, speedup=1.13, speedup_p25=1.02, speedup_p75=1.2), row(category="chat")]}
    text = summary_markdown(run)
    assert text.startswith("# Benchmark: t\n\n- Machine: x, 2 cores\n\n## Summary")
    assert "1.13" not in text and "| nothing drafted |" in text and "×1.50" in text


def test_the_compare_headline_is_the_median_of_the_pairs_and_only_beyond_noise():
    clear = Headline([1.2, 1.4, 1.3])
    assert clear.beyond_noise and clear.median == 1.3
    assert clear.detail() == ("Speed-up over 3 pairs, each side first as often as second: median ×1.30, range "
                              "×1.20 – ×1.40.")
    noisy = Headline([1.55, 0.98, 1.07])  # the first pair ×1.55 beside a median of ×1.07
    assert not noisy.beyond_noise and "within noise, so no figure" in noisy.detail()
    assert not Headline([1.55]).beyond_noise and "a single measurement" in Headline([1.55]).detail()
    pairs = [{"standard": stats(mode="standard", tokens_per_second=6.4), "speculative": stats(tokens_per_second=9.9)},
             {"standard": stats(mode="standard"), "speculative": stats(drafted_tokens=0)}]  # nothing drafted: left out
    assert speedups(pairs) == [9.9 / 6.4]


def test_no_more_pairs_where_the_first_drafted_nothing():
    assert more_pairs_skipped(stats()) is None
    said = more_pairs_skipped(stats(drafted_tokens=0, rounds=[RoundRecord(k=0, emitted=100)]))
    assert said == ("No more pairs were run: the speculative run drafted 0 of 100 tokens: the controller found "
                    "drafting did not pay here and generated normally.")


def test_each_reason_once_in_full_and_no_verdict_while_streaming():
    went_standard = stats(drafted_tokens=2, fallbacks=[Fallback(at_token=3, reason="speculation has not paid on "
                                                                "this server lately, a long reason")])
    # The fallback's own reason is shown on its own line; the speed-up line points at it, not repeats it.
    assert no_speedup_reason(went_standard) == "drafted 2 of 100 tokens: it went standard after 3 tokens (why: above)"
    # The finished chart's title does not carry (and cut) the reason.
    assert speedup_so_far(went_standard, None, 10.0) == "no speed-up figure (why: under the answer)"
    # While it streams, only what happened so far: no "did not pay" that later drafting contradicts.
    live = stats(done_reason="", output_tokens=17, drafted_tokens=0, rounds=[RoundRecord(k=0, emitted=17)])
    assert speedup_so_far(live, None, 10.0) == "no speed-up yet: drafted 0 of 17 tokens so far"


# -- 5. the small things -------------------------------------------------------------------------------------


def test_an_answer_cut_at_max_tokens_says_so():
    assert length_note(stats(output_tokens=256, done_reason="length"), 256) == (
        "The answer stopped at Max tokens (256), perhaps mid-sentence: raise Max tokens in the sidebar for a "
        "longer one.")
    assert length_note(stats(output_tokens=90, done_reason="length"), 256) is None  # the context ran out first


def test_the_address_names_the_conversation_a_reload_reopens():
    assert [address_conversation(v) for v in ("12", None, "", "x1", "-3")] == [12, None, None, None, None]


# -- 6. thinking, speculated --------------------------------------------------------------------------------


def test_a_thinking_answer_keeps_its_highlighted_reasoning_and_counts_it_apart(tmp_path):
    store = ConversationStore(tmp_path / "c.sqlite3")
    conversation = store.create("Is 91 prime?")
    thought = [["A prime has no divisor", "standard"], [" other than 1", "draft"], [" and itself.", "bonus"]]
    answer = stats(output_tokens=40, thinking_tokens=30)
    store.add_message(conversation, "assistant", "No.", pieces=[["No.", "standard"]], stats=answer,
                      thinking="".join(text for text, _ in thought), thinking_pieces=thought)
    [message] = store.messages(conversation)
    assert message["thinking_pieces"] == thought and message["thinking"].startswith("A prime")
    assert pieces_html(message["thinking_pieces"]).count(DRAFT_SPAN) == 1  # " other than 1", on green
    assert stats_summary(answer).startswith("speculative (suffix): 10 answer tokens + 30 thinking tokens, ")
    assert stats_summary(stats(output_tokens=40)).startswith("speculative (suffix): 40 tokens, ")


def test_a_pair_is_asked_again_once_a_drafter_that_remembers_answers_has_answered_the_prompt():
    """Issue 52: suffix decoding copies its earlier answer to the same prompt; lookup and a draft model
    remember nothing, so every answer of theirs is a first ask."""
    from utils.app.asks import ask_kind, question, remember_answer
    from utils.bench.first_asks import AGAIN, FIRST, remembers_answers

    assert remembers_answers("suffix") and not any(map(remembers_answers, ("lookup", DRAFT, "none")))
    url, text = "http://127.0.0.1:1", question([{"role": "user", "content": " Is 7 prime? "}])
    assert text == "Is 7 prime?" and ask_kind(url, "t", "suffix", text) == FIRST
    remember_answer(url, "t", stats(drafter="lookup", done_reason="stop"), text)
    assert ask_kind(url, "t", "suffix", text) == FIRST  # lookup's answer taught suffix nothing
    remember_answer(url, "t", stats(drafter="suffix", done_reason="stopped"), text)
    assert ask_kind(url, "t", "suffix", text) == FIRST  # a stopped answer is not kept by the drafter
    remember_answer(url, "t", stats(drafter="suffix", done_reason="stop"), text)
    assert ask_kind(url, "t", "suffix", text) == AGAIN and ask_kind(url, "t", "lookup", text) == FIRST
    assert ask_kind(url, "other", "suffix", text) == FIRST and ask_kind(url, "t", "suffix", "Is 9 prime?") == FIRST


def test_the_benchmark_table_puts_first_asks_first_and_says_what_each_means():
    rows = [row(ask="asked again", speedup=2.4, speedup_p25=2.2, speedup_p75=2.6), row(ask="first ask", speedup=1.0)]
    table = summary_table(rows)
    assert [r["asked"] for r in table] == ["first ask", "asked again"]
    assert [r["verdict"] for r in table] == ["faster", "faster"]
    from utils.app.benchmarks import asks_text

    assert asks_text(rows).startswith("First ask: standard against speculative on each prompt asked for the first")
    assert "Every speed-up here is of first asks" in asks_text(rows[1:])
    figure, _ = speedup_figure([{**r, "category": "code"} for r in rows])
    assert [trace.name for trace in figure.data] == ["suffix, K auto (asked again)", "suffix, K auto"]


def test_a_chat_speedup_needs_a_like_for_like_baseline_and_says_what_it_compares(tmp_path):
    """Issue 52: a baseline at another context length, or taken long before the answer, gives no figure."""
    from utils.app.speed import remember_baseline, speedup_text

    conversations = ConversationStore(tmp_path / "c.db")
    measured_here = AnswerStats(mode="standard", target="t", prompt_tokens=40, output_tokens=48, done_reason="stop",
                                tokens_per_second=10.0)
    remember_baseline(conversations, "u", measured_here, "'Measure baseline'")
    baseline = conversations.baseline("u", "t")
    assert baseline is not None and baseline["context_tokens"] == 64
    near = stats(prompt_tokens=300, output_tokens=100, tokens_per_second=15.0)
    text = speedup_text(near, baseline, at=baseline["measured_at"])
    assert text.startswith("speed-up ×1.50 (this answer's tokens/s) against the standard baseline 10.0 tokens/s")
    assert "at 64 tokens of context" in text and "comparable context length (this answer: about 350 tokens)" in text
    far = stats(prompt_tokens=3000, output_tokens=100, tokens_per_second=15.0)
    assert "measured at 64 tokens of context and this answer ran at about 3050" in speedup_text(far, baseline)
    later = baseline["measured_at"].replace(baseline["measured_at"][:4], str(int(baseline["measured_at"][:4]) + 1))
    assert "hours before this answer" in speedup_text(near, baseline, at=later)
    assert "measure it again" in speedup_text(near, {**baseline, "context_tokens": None})


def test_compare_tokens_per_second_is_the_first_asks_with_the_repeats_apart():
    """Issue 52: the Tokens/s figure was the median over first asks and repeats together (10.0 → 23.0 here,
    where the first ask ran 10.0 → 10.2); it is the first asks', as the headline, the repeats' apart."""
    from utils.app.compare import rate_figures

    def pair(ask: str, tps: float) -> dict:
        return {"ask": ask, "standard": stats(mode="standard", tokens_per_second=10.0),
                "speculative": stats(tokens_per_second=tps)}

    mixed = [pair("first ask", 10.2), pair("asked again", 23.0), pair("asked again", 25.0)]
    label, value, meaning, repeats = rate_figures(mixed)
    assert (label, value) == ("Tokens/s, first ask", "10.0 → 10.2")
    assert meaning == ("Tokens/s, first ask: 10.0 → 10.2 standard → speculative, the median over 1 pair on this "
                       "prompt asked for the first time.")
    assert repeats is not None and repeats.startswith("Tokens/s, asked again: 10.0 → 24.0 standard → speculative, "
                                                      "the median over 2 pairs of the same prompt asked again")
    # Only repeats (the prompt was compared before): their figure, named as theirs.
    label, value, meaning, repeats = rate_figures(mixed[1:])
    assert (label, value, repeats) == ("Tokens/s, asked again", "10.0 → 24.0", None)
    assert "asked again (no first ask in this run)" in meaning
    # Only first asks (lookup remembers nothing): every pair, and nothing apart.
    assert rate_figures([pair("first ask", 12.0), pair("first ask", 14.0)])[1:4:2] == ("10.0 → 13.0", None)
