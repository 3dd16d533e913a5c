"""Multi-turn conversations in the benchmark: one prompt per turn, each asked after the same
configuration's own earlier answers, reported by turn."""

from __future__ import annotations

import json
from pathlib import Path

from utils.bench.runner import BenchConfig, _history, load_prompts

ROOT = Path(__file__).resolve().parents[2]


def test_a_conversation_is_one_prompt_per_turn_in_order(tmp_path) -> None:
    file = tmp_path / "c.jsonl"
    conversation = {"id": "c1", "category": "code-edit", "turns": ["write f", "rename f to g"], "max_tokens": 50}
    file.write_text(json.dumps(conversation) + "\n" + json.dumps({"id": "p1", "category": "code", "prompt": "hi"}))
    prompts = load_prompts(BenchConfig(prompts_file=file, target="t", drafters=[]))
    assert [(p["id"], p["category"], p.get("turn")) for p in prompts] == [
        ("c1/1", "turn 1", 1), ("c1/2", "turn 2", 2), ("p1", "code", None)]
    assert prompts[1]["conversation"] == "c1" and prompts[1]["max_tokens"] == 50 and prompts[1]["chat"]
    # --category filters conversations by their own kind, before they become turns.
    only = load_prompts(BenchConfig(prompts_file=file, target="t", drafters=[], categories=["code-edit"]))
    assert [p["id"] for p in only] == ["c1/1", "c1/2"]


def test_each_turn_follows_the_configurations_own_answers() -> None:
    turn2 = {"id": "c1/2", "conversation": "c1", "turn": 2, "prompt": "rename f to g"}
    answers = (("lookup", "def f(): ..."), ("none", "def f(): pass"))
    runs = [{"conversation": "c1", "turn": 1, "user": "write f", "text": text, "repeat": 0, "engine": "project",
             "drafter": drafter, "k": "auto"} for drafter, text in answers]
    messages = _history({"runs": runs}, turn2, 0, ("project", "lookup", "auto"))
    assert messages == [{"role": "user", "content": "write f"}, {"role": "assistant", "content": "def f(): ..."},
                        {"role": "user", "content": "rename f to g"}]
    assert _history({"runs": runs}, turn2, 1, ("project", "lookup", "auto"))[0]["content"] == "rename f to g"


def test_the_shipped_workload_has_at_least_eight_conversations_of_four_turns() -> None:
    lines = [json.loads(line) for line in (ROOT / "prompts" / "conversations.jsonl").read_text().splitlines()]
    assert len(lines) >= 8 and all(len(line["turns"]) >= 4 for line in lines)
    assert {line["category"] for line in lines} == {"code-edit", "text-edit", "agent"}
