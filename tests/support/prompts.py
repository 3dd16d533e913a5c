"""The prompts the model-backed equality and sampling tests share."""

from __future__ import annotations

import json

from tests.support.models import ROOT

PROMPTS = [json.loads(line) for line in (ROOT / "prompts" / "bench.jsonl").open()]
# 32 varied prompts: the first 8 of each category (code, editing code, summarising, open chat).
EQUALITY_PROMPTS = [p for c in ("code", "edit", "summarize", "chat")
                    for p in [q for q in PROMPTS if q["category"] == c][:8]]
EQUALITY_TOKENS = 32
# For the Qwen pair (a 1.5B target: a 32-prompt run took 100-130 s on two cores): the two shortest of
# each category's eight, so every kind of prompt is still there and each costs the least prefill.
PAIR_PROMPTS = [p for c in ("code", "edit", "summarize", "chat")
                for p in sorted((q for q in EQUALITY_PROMPTS if q["category"] == c), key=lambda q: len(q["prompt"]))[:2]
                ]


def round_kinds(rounds: list[dict]) -> set[str]:
    """Which kinds of drafted rounds an answer's stats hold: a draft taken whole ("all", then a bonus
    token), one cut short by the target ("some"), one refused at its first token ("none")."""
    return {"all" if r["accepted"] == r["drafted"] else "some" if r["accepted"] else "none"
            for r in rounds if r["drafted"]}


CONVERSATIONS = [json.loads(line) for line in (ROOT / "prompts" / "conversations.jsonl").open()]

COLOUR = "<|im_start|>user\nName one colour.<|im_end|>\n<|im_start|>assistant\nOne colour is"
# The end of this prompt occurs earlier in it (three times, going on with red, green and blue), so
# prompt lookup and suffix decoding draft from the first token on, and the suffix tree branches there.
COLOURS = ("<|im_start|>user\nOne colour is red. One colour is green. One colour is blue. Name one more colour."
           "<|im_end|>\n<|im_start|>assistant\nOne colour is")
