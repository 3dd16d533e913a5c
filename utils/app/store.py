"""Conversations, their messages with per-answer stats, and speed baselines, in one SQLite file.

Streamlit reruns the page script on every interaction, possibly on another thread, so the store
opens a short-lived connection per call instead of holding one: nothing is shared between threads
and every write is committed before the call returns, so a reload or a restart loses nothing.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from utils.engine.stats import AnswerStats

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    pieces TEXT,          -- JSON [[text, origin], ...] as the engine emitted them
    stats TEXT,           -- JSON of utils.stats.AnswerStats
    note TEXT,            -- e.g. why an answer stopped early
    baseline TEXT,        -- JSON of the standard baseline its speed-up was measured against
    stopped INTEGER NOT NULL DEFAULT 0,  -- 1: interrupted while streaming; the partial answer is kept
    created_at TEXT NOT NULL,
    thinking TEXT,        -- a thinking model's reasoning, as the server split it from the answer
    thinking_pieces TEXT, -- JSON [[text, origin], ...] of the reasoning, as the engine emitted it
    ask TEXT              -- 'first ask' or 'asked again': whether its drafter had answered the question before
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
CREATE TABLE IF NOT EXISTS baselines (
    server TEXT NOT NULL,
    target TEXT NOT NULL,
    tokens_per_second REAL NOT NULL,
    how TEXT NOT NULL,    -- how it was measured, shown next to every speed-up
    measured_at TEXT NOT NULL,
    context_tokens INTEGER,  -- the context it ran at (prompt and half the answer): a like-for-like check
    PRIMARY KEY (server, target)
);
CREATE TABLE IF NOT EXISTS preferences (
    key TEXT PRIMARY KEY, -- a sidebar setting's widget key
    value TEXT NOT NULL   -- JSON
);
"""

DEFAULT_TITLE = "New conversation"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")  # fixed width: sorts as text


class ConversationStore:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(SCHEMA)
            columns = {row["name"] for row in db.execute("PRAGMA table_info(messages)")}
            if "stopped" not in columns:  # a database from before answers could be stopped
                db.execute("ALTER TABLE messages ADD COLUMN stopped INTEGER NOT NULL DEFAULT 0")
            if "thinking" not in columns:  # a database from before thinking models
                db.execute("ALTER TABLE messages ADD COLUMN thinking TEXT")
            if "thinking_pieces" not in columns:  # from before thinking was speculated
                db.execute("ALTER TABLE messages ADD COLUMN thinking_pieces TEXT")
            if "ask" not in columns:  # from before first asks and repeats were told apart
                db.execute("ALTER TABLE messages ADD COLUMN ask TEXT")
            if "context_tokens" not in {row["name"] for row in db.execute("PRAGMA table_info(baselines)")}:
                db.execute("ALTER TABLE baselines ADD COLUMN context_tokens INTEGER")  # from before it was kept

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """One connection for one call, committed (or rolled back) and closed at the end."""
        with closing(sqlite3.connect(self.path, timeout=10)) as db:
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA foreign_keys = ON")
            with db:
                yield db

    # -- conversations ---------------------------------------------------------------------------

    def create(self, title: str = DEFAULT_TITLE) -> int:
        stamp = now()
        with self._connect() as db:
            cursor = db.execute(
                "INSERT INTO conversations (title, created_at, updated_at) VALUES (?, ?, ?)",
                (clean_title(title), stamp, stamp),
            )
            return _inserted_id(cursor)

    def conversations(self) -> list[dict[str, Any]]:
        """Every conversation, the most recently active first."""
        with self._connect() as db:
            rows = db.execute("SELECT * FROM conversations ORDER BY updated_at DESC, id DESC").fetchall()
        return [dict(row) for row in rows]

    def search(self, text: str) -> list[dict[str, Any]]:
        """The conversations whose title or any message contains `text` (any case), most recent first."""
        pattern = "%" + text.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        with self._connect() as db:
            rows = db.execute(
                "SELECT * FROM conversations c WHERE c.title LIKE :p ESCAPE '\\' OR EXISTS (SELECT 1 FROM messages m"
                " WHERE m.conversation_id = c.id AND m.content LIKE :p ESCAPE '\\')"
                " ORDER BY updated_at DESC, id DESC", {"p": pattern}).fetchall()
        return [dict(row) for row in rows]

    def conversation(self, conversation_id: int) -> dict[str, Any] | None:
        with self._connect() as db:
            row = db.execute("SELECT * FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        return dict(row) if row else None

    def rename(self, conversation_id: int, title: str) -> None:
        with self._connect() as db:
            db.execute("UPDATE conversations SET title = ? WHERE id = ?", (clean_title(title), conversation_id))

    def delete(self, conversation_id: int) -> None:
        with self._connect() as db:
            db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    # -- messages --------------------------------------------------------------------------------

    def add_message(self, conversation_id: int, role: str, content: str, *, pieces: list | None = None,
                    stats: AnswerStats | None = None, note: str | None = None,
                    baseline: dict[str, Any] | None = None, stopped: bool = False, thinking: str | None = None,
                    thinking_pieces: list | None = None, ask: str | None = None) -> int:
        stamp = now()
        stats_json = stats.model_dump_json() if stats else None  # the one place stats become JSON
        with self._connect() as db:
            cursor = db.execute(
                "INSERT INTO messages (conversation_id, role, content, pieces, stats, note, baseline, stopped,"
                " created_at, thinking, thinking_pieces, ask) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, role, content, _dump(pieces), stats_json, note, _dump(baseline), int(stopped),
                 stamp, thinking or None, _dump(thinking_pieces or None), ask),
            )
            db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (stamp, conversation_id))
            return _inserted_id(cursor)

    def delete_from(self, conversation_id: int, message_id: int) -> None:
        """Delete a message and every later one of its conversation (regenerate, edit and resend)."""
        with self._connect() as db:
            db.execute("DELETE FROM messages WHERE conversation_id = ? AND id >= ?", (conversation_id, message_id))
            db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (now(), conversation_id))

    def messages(self, conversation_id: int) -> list[dict[str, Any]]:
        with self._connect() as db:
            rows = db.execute(
                "SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,)
            ).fetchall()
        return [
            {**dict(row), "pieces": _load(row["pieces"]), "thinking_pieces": _load(row["thinking_pieces"]),
             "stats": _load_stats(row["stats"]),
             "baseline": _load(row["baseline"]), "stopped": bool(row["stopped"])}
            for row in rows
        ]

    # -- baselines -------------------------------------------------------------------------------

    def set_baseline(self, server: str, target: str, tokens_per_second: float, how: str,
                     context_tokens: int | None = None) -> None:
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO baselines (server, target, tokens_per_second, how, measured_at, context_tokens)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (server, target, tokens_per_second, how, now(), context_tokens),
            )

    def baseline(self, server: str, target: str) -> dict[str, Any] | None:
        """The last standard speed measured for this server and target, or None if never measured."""
        with self._connect() as db:
            row = db.execute(
                "SELECT * FROM baselines WHERE server = ? AND target = ?", (server, target)
            ).fetchone()
        return dict(row) if row else None

    # -- preferences -------------------------------------------------------------------------------

    def preferences(self) -> dict[str, Any]:
        """The sidebar settings as last chosen, by widget key (kept across reloads and restarts)."""
        with self._connect() as db:
            return {row["key"]: json.loads(row["value"]) for row in db.execute("SELECT * FROM preferences")}

    def set_preferences(self, values: dict[str, Any]) -> None:
        with self._connect() as db:
            db.executemany("INSERT OR REPLACE INTO preferences (key, value) VALUES (?, ?)",
                           [(key, json.dumps(value)) for key, value in values.items()])

    # -- export ----------------------------------------------------------------------------------

    def export_json(self, conversation_id: int) -> str:
        conversation = self.conversation(conversation_id)
        if conversation is None:
            raise KeyError(f"no conversation {conversation_id}")
        messages = [{**message, "stats": message["stats"] and message["stats"].model_dump()}
                    for message in self.messages(conversation_id)]
        return json.dumps({**conversation, "messages": messages}, indent=2, ensure_ascii=False)

    def export_markdown(self, conversation_id: int) -> str:
        conversation = self.conversation(conversation_id)
        if conversation is None:
            raise KeyError(f"no conversation {conversation_id}")
        lines = [f"# {conversation['title']}", "", f"_Started {conversation['created_at']}_", ""]
        for message in self.messages(conversation_id):
            lines += [f"## {message['role'].capitalize()}", "", message["content"], ""]
            if message["note"]:
                lines += [f"> {message['note']}", ""]
            if stats := message["stats"]:
                lines += [f"_{stats_summary(stats)}_", ""]
        return "\n".join(lines)


def stats_summary(stats: AnswerStats) -> str:
    """One line about an answer, e.g. 'speculative (lookup): 24 tokens, 31.0 tokens/s, 60% accepted'."""
    mode = stats.mode + (f" ({stats.drafter})" if stats.drafter else "")
    tokens = f"{stats.output_tokens} tokens"
    if stats.thinking_tokens:  # a thinking answer: its reasoning apart from the answer proper
        tokens = (f"{stats.output_tokens - stats.thinking_tokens} answer tokens + {stats.thinking_tokens} "
                  "thinking tokens")
    text = f"{mode}: {tokens}, {stats.tokens_per_second:.1f} tokens/s"
    if stats.drafted_tokens:
        text += f", {stats.acceptance_rate:.0%} of drafted tokens accepted"
    return text


TITLE_CHARACTERS = 80


def clean_title(title: str) -> str:
    """A title on one line, at most TITLE_CHARACTERS long: a longer one ends at a word, with "…"."""
    words = " ".join(title.split())
    if len(words) <= TITLE_CHARACTERS:
        return words or DEFAULT_TITLE
    cut = words[:TITLE_CHARACTERS - 1]  # and the "…"
    if words[TITLE_CHARACTERS - 1] != " " and " " in cut:  # cut inside a word: end before it
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:") + "…"


def _inserted_id(cursor: sqlite3.Cursor) -> int:
    """The id of the row an INSERT just made (sqlite3 types `lastrowid` as optional: None before any insert)."""
    if cursor.lastrowid is None:
        raise sqlite3.DatabaseError("the INSERT gave no row id")
    return cursor.lastrowid


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _load_stats(text: str | None) -> AnswerStats | None:
    """A message's statistics as written. A row this version cannot read (written by another version
    of the schema, or edited by hand) shows its answer without statistics instead of failing the page."""
    if text is None:
        return None
    try:
        return AnswerStats.model_validate_json(text)
    except ValidationError:
        return None
