"""Which idle slot a request gets (utils/embedded/runtime/slots.py `idle_slot`), on exact small caches."""

from __future__ import annotations

from utils.embedded.runtime.cache import TokenCache
from utils.embedded.runtime.slots import Slot, idle_slot

SYSTEM = b"<|system|>You are a helpful assistant.<|end|>"


def slot(seq: int, text: bytes, used: int) -> Slot:
    cache = TokenCache([], lambda text, bos: [], adds_bos=False, bos=0)
    cache.text = bytearray(text)
    return Slot(seq=seq, cache=cache, used=used)


def test_a_question_asked_again_goes_to_the_slot_that_holds_it_and_its_answer() -> None:
    question = SYSTEM + b"<|user|>Write a SQL query.<|end|><|assistant|>"
    answered = slot(0, question + b"SELECT name FROM customers JOIN orders ON ... " * 5, used=2)
    assert len(question) * 2 < len(answered.cache.text)  # the answer is most of what it holds
    assert idle_slot([answered, slot(1, b"", used=1)], question) is answered


def test_a_conversation_s_next_turn_continues_its_slot() -> None:
    turn = SYSTEM + b"<|user|>Hi<|end|><|assistant|>Hello!<|end|>"
    other = slot(1, SYSTEM + b"<|user|>Something else entirely<|end|>", used=1)
    mine = slot(0, turn, used=2)
    assert idle_slot([other, mine], turn + b"<|user|>" + b"Now a long follow-up question. " * 10) is mine


def test_a_new_conversation_that_shares_only_a_system_prompt_leaves_a_long_one_alone() -> None:
    long_conversation = slot(0, SYSTEM + b"<|user|>Hi<|end|><|assistant|>" + b"a long answer " * 40, used=2)
    empty = slot(1, b"", used=1)
    new = SYSTEM + b"<|user|>" + b"A question much longer than the system prompt before it. " * 3
    assert idle_slot([long_conversation, empty], new) is empty


def test_with_no_match_the_slot_used_longest_ago_goes_first_and_a_busy_one_never() -> None:
    a, b = slot(0, b"one text", used=5), slot(1, b"another", used=3)
    assert idle_slot([a, b], b"unrelated prompt") is b
    b.answer = object()  # type: ignore[assignment] - busy
    assert idle_slot([a, b], b"unrelated prompt") is a
    a.answer = object()  # type: ignore[assignment]
    assert idle_slot([a, b], b"unrelated prompt") is None
