"""The conversation store on a real SQLite file."""

from __future__ import annotations

import json
import sqlite3
import threading

import pytest

from utils.app.store import DEFAULT_TITLE, ConversationStore, stats_summary
from utils.engine.stats import AnswerStats

STATS = AnswerStats.model_validate({
    "mode": "speculative", "target": "smollm2:135m", "drafter": "lookup", "output_tokens": 12,
    "tokens_per_second": 30.5, "drafted_tokens": 10, "accepted_tokens": 6, "acceptance_rate": 0.6,
    "rounds": [{"k": 4, "drafted": 4, "accepted": 2, "emitted": 3, "seconds": 0.1, "at_seconds": 0.3}],
})
PIECES = [["Hello", "draft"], [" there", "correction"], ["<b>", "bonus"]]


@pytest.fixture
def store(tmp_path) -> ConversationStore:
    return ConversationStore(tmp_path / "data" / "conversations.sqlite3")


def test_create_add_and_read_back(store):
    conversation = store.create("First chat")
    store.add_message(conversation, "user", "Say hello")
    baseline = {"tokens_per_second": 20.0, "how": "last standard answer", "measured_at": "2026-01-01T00:00:00"}
    store.add_message(conversation, "assistant", "Hello there<b>", pieces=PIECES, stats=STATS, baseline=baseline)

    messages = store.messages(conversation)
    assert messages[1]["baseline"] == baseline  # what its speed-up was measured against
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["pieces"] is None and messages[0]["stats"] is None
    assert messages[1]["pieces"] == PIECES
    assert messages[1]["stats"] == STATS
    assert messages[1]["created_at"]
    assert store.conversation(conversation)["title"] == "First chat"


def test_conversations_most_recent_first(store):
    older = store.create("older")
    newer = store.create("newer")
    assert [c["id"] for c in store.conversations()] == [newer, older]
    store.add_message(older, "user", "back to this one")
    assert store.conversations()[0]["id"] == older


def test_rename_cleans_the_title(store):
    conversation = store.create()
    assert store.conversation(conversation)["title"] == DEFAULT_TITLE
    store.rename(conversation, "  a   new\nname ")
    assert store.conversation(conversation)["title"] == "a new name"
    store.rename(conversation, "   ")
    assert store.conversation(conversation)["title"] == DEFAULT_TITLE


def test_delete_removes_messages_too(store):
    kept, deleted = store.create("kept"), store.create("deleted")
    store.add_message(kept, "user", "stay")
    store.add_message(deleted, "user", "go")
    store.delete(deleted)
    assert [c["id"] for c in store.conversations()] == [kept]
    assert store.conversation(deleted) is None
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 1


def test_export_json_holds_everything(store):
    conversation = store.create("export me")
    store.add_message(conversation, "user", "Say hello")
    store.add_message(conversation, "assistant", "Hel", pieces=[["Hel", "standard"]], stats=STATS,
                      note="the server stopped answering; partial text kept")
    exported = json.loads(store.export_json(conversation))
    assert exported["title"] == "export me"
    assert AnswerStats.model_validate(exported["messages"][1]["stats"]) == STATS
    assert exported["messages"][1]["note"].startswith("the server stopped")


def test_export_markdown(store):
    conversation = store.create("Greetings")
    store.add_message(conversation, "user", "Say hello")
    store.add_message(conversation, "assistant", "Hello there", stats=STATS, note="cut short")
    markdown = store.export_markdown(conversation)
    assert markdown.startswith("# Greetings")
    assert "## User\n\nSay hello" in markdown
    assert "## Assistant\n\nHello there" in markdown
    assert "> cut short" in markdown
    assert stats_summary(STATS) in markdown


def test_export_of_a_missing_conversation_says_so(store):
    with pytest.raises(KeyError):
        store.export_markdown(12345)


def test_reopening_the_file_keeps_everything(tmp_path):
    path = tmp_path / "conversations.sqlite3"
    first = ConversationStore(path)
    conversation = first.create("persisted")
    first.add_message(conversation, "assistant", "kept", pieces=PIECES, stats=STATS)
    first.set_baseline("http://127.0.0.1:1", "smollm2:135m", 42.0, "last standard answer")

    reopened = ConversationStore(path)  # a restart: a new object over the same file
    assert reopened.conversations()[0]["title"] == "persisted"
    assert reopened.messages(conversation)[0]["stats"] == STATS
    assert reopened.baseline("http://127.0.0.1:1", "smollm2:135m")["tokens_per_second"] == 42.0


def test_baseline_is_per_server_and_target_and_replaced(store):
    assert store.baseline("http://a", "m") is None
    store.set_baseline("http://a", "m", 10.0, "first")
    store.set_baseline("http://a", "m", 12.0, "second")
    store.set_baseline("http://b", "m", 99.0, "other server")
    baseline = store.baseline("http://a", "m")
    assert (baseline["tokens_per_second"], baseline["how"]) == (12.0, "second")
    assert baseline["measured_at"]


def test_usable_from_several_threads(store):
    """Streamlit runs scripts on their own threads: one store object must work from all of them."""
    conversation = store.create()
    errors: list[Exception] = []

    def write(index: int) -> None:
        try:
            store.add_message(conversation, "user", f"message {index}")
        except Exception as error:  # noqa: BLE001 - collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(store.messages(conversation)) == 8


def test_stats_summary():
    assert stats_summary(STATS) == "speculative (lookup): 12 tokens, 30.5 tokens/s, 60% of drafted tokens accepted"
    assert stats_summary(AnswerStats(mode="standard", target="t", output_tokens=3, tokens_per_second=1.0)) == (
        "standard: 3 tokens, 1.0 tokens/s"
    )


def test_a_stopped_answer_is_kept_and_marked(store):
    conversation = store.create("stopped")
    store.add_message(conversation, "user", "Count to 100")
    store.add_message(conversation, "assistant", "1, 2, 3", pieces=[["1, 2, 3", "standard"]],
                      note="Stopped after 5 tokens: the partial answer is kept.", stopped=True)
    store.add_message(conversation, "assistant", "done")
    assert [m["stopped"] for m in store.messages(conversation)] == [False, True, False]
    assert store.messages(conversation)[1]["content"] == "1, 2, 3"


def test_a_database_from_before_stopping_gains_the_column(tmp_path):
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as db:  # the messages table as it was before answers could be stopped
        db.executescript("""
            CREATE TABLE conversations (id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL,
                created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
            CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id INTEGER NOT NULL,
                role TEXT NOT NULL, content TEXT NOT NULL, pieces TEXT, stats TEXT, note TEXT, baseline TEXT,
                created_at TEXT NOT NULL);
            INSERT INTO conversations VALUES (1, 'old', '2026-01-01', '2026-01-01');
            INSERT INTO messages (conversation_id, role, content, created_at) VALUES (1, 'user', 'hi', '2026-01-01');
        """)
    db.close()
    store = ConversationStore(path)
    assert [m["stopped"] for m in store.messages(1)] == [False]
    store.add_message(1, "assistant", "partial", stopped=True)
    assert store.messages(1)[-1]["stopped"] is True


def test_search_finds_titles_and_messages_in_any_case_and_takes_wildcards_literally(store):
    fruit = store.create("Fruit")
    store.add_message(fruit, "user", "Is a tomato 100% a fruit_or_not?")
    colours = store.create("Colours of the RAINBOW")
    store.add_message(colours, "user", "Name them")
    assert [c["id"] for c in store.search("rainbow")] == [colours]
    assert [c["id"] for c in store.search("TOMATO")] == [fruit]
    assert [c["id"] for c in store.search("0% a")] == [fruit]
    assert store.search("%") == store.search("100%") and [c["id"] for c in store.search("%")] == [fruit]
    assert [c["id"] for c in store.search("o_a")] == []  # "_" is not "any character"
    assert store.search("nothing like this") == []


def test_delete_from_drops_a_message_and_every_later_one_of_its_conversation_only(store):
    first, other = store.create("one"), store.create("two")
    ids = [store.add_message(first, role, text) for role, text in
           [("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("assistant", "a2")]]
    kept = store.add_message(other, "user", "elsewhere")
    store.delete_from(first, ids[2])
    assert [m["content"] for m in store.messages(first)] == ["q1", "a1"]
    assert [m["id"] for m in store.messages(other)] == [kept]


def test_preferences_are_kept_as_json_and_replaced(tmp_path):
    path = tmp_path / "conversations.sqlite3"
    ConversationStore(path).set_preferences({"max_tokens": 64, "seed": None, "draft_length": "auto", "p_min": 0.5})
    ConversationStore(path).set_preferences({"max_tokens": 12})
    assert ConversationStore(path).preferences() == {"max_tokens": 12, "seed": None, "draft_length": "auto",
                                                     "p_min": 0.5}


def test_a_row_whose_stats_this_version_cannot_read_shows_its_answer_without_them(store):
    conversation = store.create("from another version")
    store.add_message(conversation, "assistant", "kept", stats=STATS)
    with sqlite3.connect(store.path) as db:  # a schema this version does not know: mode is not one of its own
        db.execute("UPDATE messages SET stats = ?", (json.dumps({**STATS.model_dump(), "mode": "telepathic"}),))
    db.close()
    message = store.messages(conversation)[0]
    assert message["content"] == "kept" and message["stats"] is None
    assert "kept" in store.export_markdown(conversation)
