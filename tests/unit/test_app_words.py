"""What the app says, in words (issue 52): titles end at a word, the Proxy page says why no proxy answers
(not an exception's name), and an answer's stats are a table of figures with what each counts."""

from __future__ import annotations

import httpx
import pytest

from utils.app.charts import stats_rows
from utils.app.models import whole_table
from utils.app.proxy import recent_traffic, unreachable_text
from utils.app.store import DEFAULT_TITLE, TITLE_CHARACTERS, clean_title
from utils.engine.stats import AnswerStats, RoundRecord
from utils.processes import free_port


def test_a_long_title_ends_at_a_word():
    question = ("Explain how speculative decoding keeps the target model's distribution exactly when the "
                "drafter proposes tokens")
    title = clean_title(question)
    assert len(title) <= TITLE_CHARACTERS and title.endswith("…")
    assert question.startswith(title[:-1]) and question[len(title) - 1] == " "  # cut before a word, not in one
    assert clean_title("  short\n title ") == "short title" and clean_title(" \n") == DEFAULT_TITLE
    assert clean_title("x" * 200) == "x" * (TITLE_CHARACTERS - 1) + "…"  # one long word: cut, marked


def test_the_proxy_page_says_in_words_that_nothing_listens():
    url = f"http://127.0.0.1:{free_port()}"  # a port nothing listens on
    with pytest.raises(httpx.ConnectError) as raised:
        recent_traffic(url, None, timeout=5)
    text = unreachable_text(url, raised.value)
    assert "ConnectError" not in text
    assert text.startswith(f"No proxy answers at {url}: nothing listens at that address.")
    assert f"`python cli.py proxy --upstream URL --port {url.rsplit(':', 1)[-1]}`" in text


def test_stats_are_a_table_of_figures_with_what_each_counts():
    stats = AnswerStats(mode="speculative", target="t", drafter="suffix", method="greedy", done_reason="stop")
    stats.observe_round(RoundRecord(k=4, drafted=4, accepted=3, emitted=4, seconds=0.5, at_seconds=0.5))
    stats.finish(0.5)
    rows = {row["figure"]: row for row in stats_rows(stats)}
    assert rows["how it was made"]["value"] == "speculative, drafter suffix, greedy verification"
    assert rows["tokens"]["value"] == "4" and rows["tokens/s"]["value"] == "8.0"
    assert rows["accepted draft tokens"]["what it counts"].startswith("75% of the drafted")
    assert all(row["what it counts"] for row in rows.values())
    standard = {row["figure"] for row in stats_rows(AnswerStats(mode="standard", target="t"))}
    assert "drafted tokens" not in standard and "tokens/s" in standard
    table = whole_table(stats_rows(stats), "figure")
    assert table.loc["tokens"]["value"] == "4" and list(table.columns) == ["value", "what it counts"]
