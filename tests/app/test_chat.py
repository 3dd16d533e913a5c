"""The Chat page on the real embedded server (AppTest): answers streamed and stored, conversations
listed, opened, renamed, deleted, and the speed-up or the reason there is none."""

from __future__ import annotations

import re

import pytest

import config
from tests.support.app import (
    REPEAT_PROMPT,
    answer_texts,
    conversation_buttons,
    open_app,
    short_answers,
    speculative_stats,
)
from tests.support.models import SMALL
from utils.app.store import ConversationStore


def test_chat_standard_then_speculative_persists_across_reload(data_dir):
    at = open_app()
    assert "no baseline measured yet" in " ".join(c.value for c in at.sidebar.caption)

    # A standard answer: it becomes the baseline for this server and target.
    short_answers(at, speculative=False)
    at.chat_input[0].set_value(REPEAT_PROMPT).run()
    assert not at.exception, at.exception
    assert len(answer_texts(at)) == 1 and answer_texts(at)[0].strip()
    assert "standard baseline" in " ".join(c.value for c in at.sidebar.caption)

    # A speculative answer: streamed, saved with its stats, a chart and a measured speed-up.
    short_answers(at, speculative=True)
    at.chat_input[0].set_value(REPEAT_PROMPT).run()
    assert not at.exception, at.exception
    texts = answer_texts(at)
    assert len(texts) == 2 and texts[1].strip()
    assert [e.label for e in at.expander].count("Stats") == 2
    assert at.get("plotly_chart"), "the last answer has its charts"
    assert any("speed-up ×" in c.value for c in at.caption)
    # The stats, as a table a person reads (they were raw JSON): each figure with what it counts.
    stats_tables = [t.value for t in at.table if "what it counts" in t.value]
    assert any(t.loc["how it was made"]["value"].startswith("speculative") for t in stats_tables)
    assert all(t.loc["tokens/s"]["what it counts"] for t in stats_tables)

    # A reload is a new session: the conversation is listed and shown from the database.
    reloaded = open_app()
    stored = ConversationStore(data_dir / "conversations.sqlite3")
    [conversation] = stored.conversations()
    assert conversation_buttons(reloaded) == [(REPEAT_PROMPT, True)]
    assert answer_texts(reloaded) == texts
    roles = [m["role"] for m in stored.messages(conversation["id"])]
    assert roles == ["user", "assistant", "user", "assistant"]


@pytest.fixture(scope="module")
def speculating_url(tmp_path_factory):
    """`cli.py serve` with speculation on, as the app starts its own embedded server."""
    from utils.embedded.server import EmbeddedServer

    with EmbeddedServer(log_path=tmp_path_factory.mktemp("serve") / "serve.log", speculation=True) as server:
        yield server.url


def test_chat_on_a_speculating_server_shows_the_answer_the_server_made(speculating_url, tmp_path, monkeypatch):
    """Against `cli.py serve` the engine runs in the server (no HTTP per round): the page asks for the
    answer's events with its sidebar's drafter and K, and shows and stores them as its own: the text,
    the rounds for the chart, the statistics; the server counted the drafts it verified."""
    import httpx

    monkeypatch.setenv("OLLAMA_HOST", speculating_url)
    monkeypatch.setenv("SPEC_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPEC_TARGET_MODEL", SMALL)
    config.get_settings.cache_clear()
    try:
        at = open_app()
        short_answers(at, speculative=True, drafter="lookup", k=4)
        at.chat_input[0].set_value(REPEAT_PROMPT).run()
        assert not at.exception, at.exception
        [conversation] = ConversationStore(tmp_path / "data" / "conversations.sqlite3").conversations()
        stored = ConversationStore(tmp_path / "data" / "conversations.sqlite3").messages(conversation["id"])
        stats = [m["stats"].model_dump() for m in stored if m.get("stats")]
        assert len(answer_texts(at)) == 1 and answer_texts(at)[0].strip()
        assert stats and stats[-1]["mode"] == "speculative" and stats[-1]["drafter"] == "lookup"
        assert stats[-1]["drafted_tokens"] > 0 and set(stats[-1]["k_history"]) <= {0, 4}
        assert at.get("plotly_chart"), "the answer has its charts, from the rounds the server sent"
        metrics = httpx.get(f"{speculating_url}/metrics", timeout=30).text
        made = re.search(rf'spec_decode_num_draft_tokens_total{{drafter="lookup",target="{SMALL}"}} (\d+)', metrics)
        assert made and int(made.group(1)) == stats[-1]["drafted_tokens"], metrics
    finally:
        config.get_settings.cache_clear()


def test_chat_context_full_keeps_the_answer_with_a_note(data_dir, monkeypatch):
    monkeypatch.setenv("SPEC_NUM_CTX", "256")
    config.get_settings.cache_clear()
    at = open_app()
    short_answers(at, speculative=True)
    at.chat_input[0].set_value("Summarise this text. " + "The cat sat on the mat and looked around. " * 40).run()
    assert not at.exception, at.exception
    [note] = [w.value for w in at.warning]
    assert "no longer fits in the model's context (256 tokens)" in note
    stored = ConversationStore(data_dir / "conversations.sqlite3")
    [conversation] = stored.conversations()
    answer = stored.messages(conversation["id"])[-1]
    assert answer["role"] == "assistant" and answer["note"] == note and answer["stats"] is None


def test_chat_lists_conversations_opens_by_id_renames_deletes_after_asking_and_exports(data_dir):
    stored = ConversationStore(data_dir / "conversations.sqlite3")
    first = stored.create("same title")
    stored.add_message(first, "user", "hello")
    stored.add_message(first, "assistant", "hi <there>", pieces=[["hi", "draft"], [" <there>", "bonus"]])
    second = stored.create("same title")  # the most recent: listed first and opened by default
    stored.add_message(second, "user", "second question")

    at = open_app()
    assert conversation_buttons(at) == [("same title", True), ("same title", False)]  # two, told apart by id
    assert [m.value for m in at.chat_message[0].markdown] == ["second question"]
    at.sidebar.button(key=f"conversation-{first}").click().run()
    assert conversation_buttons(at) == [("same title", False), ("same title", True)]
    assert "hi" in answer_texts(at)[0] and "&lt;there&gt;" in answer_texts(at)[0]
    assert {b.label for b in at.get("download_button")} == {"Export as JSON", "Export as Markdown"}

    at.text_input(key=f"title-{first}").set_value("greetings")
    at.button(key="rename").click().run()
    assert stored.conversation(first)["title"] == "greetings"
    assert ("greetings", True) in conversation_buttons(at)

    # Delete asks first; Cancel keeps it.
    at.button(key="delete").click().run()
    assert "Delete “greetings” and its 2 messages? This cannot be undone." in [w.value for w in at.warning]
    assert len(stored.conversations()) == 2
    at.button(key="delete-cancel").click().run()
    assert not at.warning and len(stored.conversations()) == 2

    at.button(key="delete").click().run()
    at.button(key="delete-confirm").click().run()
    assert not at.exception, at.exception
    assert [c["id"] for c in stored.conversations()] == [second]
    assert conversation_buttons(at) == [("same title", True)]


def test_chat_new_twice_then_a_question_makes_one_conversation(data_dir):
    stored = ConversationStore(data_dir / "conversations.sqlite3")
    old = stored.create("old one")
    stored.add_message(old, "user", "hello")

    at = open_app()
    short_answers(at, speculative=False)
    at.sidebar.button(key="new").click().run()
    assert conversation_buttons(at) == [("old one", False)] and not at.chat_message
    assert "A new conversation" in " ".join(c.value for c in at.caption)
    at.sidebar.button(key="new").click().run()
    assert len(stored.conversations()) == 1, "New stores nothing"

    at.chat_input[0].set_value(REPEAT_PROMPT).run()
    assert not at.exception, at.exception
    assert [c["title"] for c in stored.conversations()] == [REPEAT_PROMPT, "old one"]
    assert conversation_buttons(at) == [(REPEAT_PROMPT, True), ("old one", False)]
    assert len(answer_texts(at)) == 1


def test_the_qwen_example_picks_the_pair_and_answers_with_it(data_dir):
    at = open_app()
    at.sidebar.number_input(key="max_tokens").set_value(12).run()
    [qwen] = [b for b in at.button if b.key == "example-Complete code with the Qwen pair"]
    assert not qwen.disabled  # the test server has both models
    qwen.click().run()
    assert not at.exception, at.exception
    # The answer used the pair; the sidebar is the user's own again after it (issue 44).
    assert at.sidebar.selectbox(key="target").value == SMALL
    assert at.sidebar.selectbox(key="drafter").value == "suffix"
    stored = ConversationStore(data_dir / "conversations.sqlite3")
    [conversation] = stored.conversations()
    question, answer = stored.messages(conversation["id"])
    assert question["content"].startswith("Complete this Python function")
    assert answer["stats"].target == "qwen2.5-coder:1.5b" and answer["stats"].drafter == "qwen2.5-coder:0.5b"


def test_chat_shows_no_speedup_where_nothing_was_drafted(data_dir):
    """A speed-up only where speculation ran: otherwise the reason, in the answer's caption. Where there
    is a figure it says what it compares: this answer's rate, or a question asked again, against a
    standard baseline taken recently at a comparable context length."""
    from utils.app.store import now

    stored = ConversationStore(data_dir / "conversations.sqlite3")
    baseline = {"tokens_per_second": 20.0, "how": "last standard answer in Chat", "measured_at": now(),
                "context_tokens": 30}
    conversation = stored.create("speeds")
    stored.add_message(conversation, "user", "hello")
    stored.add_message(conversation, "assistant", "x" * 127, baseline=baseline,
                       stats=speculative_stats(127, 2, 1, [4] + [0] * 20))
    stored.add_message(conversation, "user", "again")
    stored.add_message(conversation, "assistant", "short", baseline=baseline, stats=speculative_stats(3, 3, 3, [4]))
    stored.add_message(conversation, "user", "and again")
    stored.add_message(conversation, "assistant", "fine", baseline=baseline,
                       stats=speculative_stats(40, 30, 20, [4] * 8), ask="first ask")
    stored.add_message(conversation, "user", "and again")
    stored.add_message(conversation, "assistant", "fine", baseline=baseline,
                       stats=speculative_stats(40, 36, 36, [4] * 9, tokens_per_second=60.0), ask="asked again")

    at = open_app()
    captions = [c.value for c in at.caption if c.value.startswith("speculative")]
    assert len(captions) == 4, captions
    assert ("no speed-up shown: drafted 2 of 127 tokens: the controller found drafting did not pay here"
            in captions[0]) and "×" not in captions[0]
    assert "no speed-up shown: 3 tokens is too short an answer to measure a speed-up" in captions[1]
    assert "×" not in captions[1]
    assert ("speed-up ×2.00 (this answer's tokens/s) against the standard baseline 20.0 tokens/s (last standard "
            "answer in Chat, at 30 tokens of context" in captions[2])
    assert "standard generation on this server at a comparable context length (this answer: about 20 tokens)" in \
        captions[2]
    assert "speed-up ×3.00 (asked again: the drafter had already answered this question and copies it" in captions[3]


def test_a_question_asked_again_is_marked_before_it_streams_and_its_speedup_says_so(data_dir):
    """Suffix decoding (the default drafter) remembers its answers: the same question asked again is
    drafted from the first answer, a copy. Chat decides before streaming whether the drafter has
    answered the question, saves that with the answer, and its speed-up line says "asked again":
    never shown as a first ask's figure, in the session or after a reload."""
    question = "Repeat this sentence exactly: Seven green owls sing softly at noon."  # asked nowhere else
    at = open_app()
    short_answers(at, speculative=False)
    at.chat_input[0].set_value(question).run()  # the standard baseline, at this context length
    short_answers(at, speculative=True, drafter="suffix")
    for _ in range(2):  # a first ask, then the same question again
        at.chat_input[0].set_value(question).run()
        assert not at.exception, at.exception

    stored = ConversationStore(data_dir / "conversations.sqlite3")
    [conversation] = stored.conversations()
    answers = [m for m in stored.messages(conversation["id"]) if m["role"] == "assistant"]
    assert [m["ask"] for m in answers] == [None, "first ask", "asked again"]
    for shown in (at, open_app()):  # this session, and a reload drawn from the store
        captions = [c.value for c in shown.caption if c.value.startswith("speculative")]
        assert len(captions) == 2, captions
        assert "asked again" not in captions[0]
        assert "speed-up ×" in captions[1] and "asked again: the drafter had already answered this question" in \
            captions[1], captions[1]
        assert "this answer's tokens/s" not in captions[1]


def test_a_stopped_answer_keeps_its_text_and_the_rounds_so_far():
    from utils.app.answer_view import Answer
    from utils.engine.stats import AnswerStats, RoundRecord

    live = AnswerStats(mode="speculative", target=SMALL, drafter="lookup")
    live.observe_round(RoundRecord(k=4, drafted=4, accepted=3, emitted=4, seconds=0.2, at_seconds=0.5))
    answer = Answer(text="The quick", pieces=[["The quick", "draft"]], live=live, live_at=0.5)
    answer.stop()
    assert answer.stopped and answer.text == "The quick"
    assert answer.stats.done_reason == "stopped" and answer.stats.tokens_per_second == pytest.approx(8.0)
    assert answer.note == "Stopped after 4 tokens: the partial answer is kept."

    nothing = Answer()
    nothing.stop()
    assert nothing.stopped and nothing.stats is None and nothing.note == "Stopped early: no text had been generated."


def test_the_chart_says_so_far_only_while_the_answer_streams():
    from utils.app.speed import speedup_so_far

    baseline = {"tokens_per_second": 20.0, "context_tokens": 50}  # like-for-like: about the answer's context
    live = speculative_stats(100, 80, 60, [4] * 20, done_reason="")
    assert speedup_so_far(live, baseline, 30.0) == "speed-up so far ×1.50 against the standard baseline"
    finished = live.model_copy(update={"done_reason": "stop"})
    assert speedup_so_far(finished, baseline, 30.0) == "speed-up ×1.50 against the standard baseline"
    assert (speedup_so_far(finished, baseline, 30.0, asked_again=True)
            == "speed-up ×1.50 (asked again: a copy) against the standard baseline")
    short = finished.model_copy(update={"output_tokens": 3, "drafted_tokens": 3})
    # Why not is said once, in full, in the line under the answer (a chart title cut it off).
    assert speedup_so_far(short, baseline, 30.0) == "no speed-up figure (why: under the answer)"


# Whitespace, emoji and right-to-left text in a question (from the bad-input tests).
EMOJI_RTL = "Repeat this line exactly: 🚀 שלום עולם — مرحبا بالعالم 👍🏽 café"


def test_app_chat_with_whitespace_emoji_and_right_to_left_prompts(data_dir):
    at = open_app()
    short_answers(at, speculative=True)
    for prompt in ("   ", EMOJI_RTL):
        at.chat_input[0].set_value(prompt).run()
        assert not at.exception, at.exception
        assert not at.error, [e.value for e in at.error]
    stored = ConversationStore(data_dir / "conversations.sqlite3")
    [conversation] = stored.conversations()
    messages = stored.messages(conversation["id"])
    # a message of spaces is not sent (nothing stored for it); the other is stored and read back exactly
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["content"] == EMOJI_RTL
    assert "\ufffd" not in messages[1]["content"]
