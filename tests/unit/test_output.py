"""`Output`: the answer as the user gets it, with stop strings, held-back text and the token limit."""

from __future__ import annotations

from utils.engine.events import TextEvent
from utils.engine.output import Output


def events(*pairs: tuple[str, str]) -> list[TextEvent]:
    return [TextEvent(text, origin) for text, origin in pairs]


def test_plain_text_is_released_as_it_comes_with_its_origin() -> None:
    out = Output(stop=[], max_tokens=10)
    assert out.add("Hello", "standard") == events(("Hello", "standard"))
    assert out.add(" world", "draft") == events((" world", "draft"))
    assert out.text == "Hello world" and out.tokens == 2 and out.remaining == 8
    assert out.done_reason is None


def test_a_possible_stop_start_is_held_back_until_it_is_known() -> None:
    out = Output(stop=["</s>"], max_tokens=10)
    assert out.add("x <", "standard") == events(("x ", "standard"))
    assert out.add("/", "draft") == []  # "</" still could be the stop string
    assert out.text == "x "
    # "</b" is not "</s": everything held back goes out, each part with the origin it came with.
    assert out.add("b>", "bonus") == events(("<", "standard"), ("/", "draft"), ("b>", "bonus"))
    assert out.text == "x </b>" and out.done_reason is None


def test_a_stop_string_split_across_pieces_ends_the_answer_before_it() -> None:
    out = Output(stop=["END"], max_tokens=100)
    assert out.add("Hello E", "draft") == events(("Hello ", "draft"))
    assert out.add("N", "correction") == []
    assert out.add("D and more", "bonus") == []
    assert out.done_reason == "stop"
    assert out.text == "Hello "
    assert out.pending == []  # nothing after a stop is ever emitted
    assert out.end("length") == []  # and the first reason stays
    assert out.done_reason == "stop"


def test_a_piece_that_holds_the_stop_is_split_and_keeps_its_origin() -> None:
    out = Output(stop=["STOP"], max_tokens=100)
    assert out.add("ab", "draft") == events(("ab", "draft"))
    assert out.add("cdSTOPef", "bonus") == events(("cd", "bonus"))
    assert out.text == "abcd" and out.generated == "abcdSTOPef"


def test_the_earliest_of_several_stop_strings_wins() -> None:
    out = Output(stop=["cd", "b"], max_tokens=100)
    assert out.add("abcd", "standard") == events(("a", "standard"))
    assert out.done_reason == "stop"


def test_a_stop_string_inside_one_piece_after_released_text() -> None:
    out = Output(stop=["\n\n"], max_tokens=100)
    assert out.add("one\n", "standard") == events(("one", "standard"))  # "\n" held back
    assert out.add("\ntwo", "draft") == []  # the held "\n" and this "\n" make the stop
    assert out.text == "one" and out.done_reason == "stop"


def test_empty_stop_strings_are_ignored() -> None:
    out = Output(stop=["", "Z"], max_tokens=100)
    assert out.stop == ["Z"]
    assert out.add("abc", "standard") == events(("abc", "standard"))


def test_the_token_limit_releases_everything_held_and_ends() -> None:
    out = Output(stop=["</s>"], max_tokens=3)
    out.add("a", "standard")
    assert out.add("<", "draft") == []  # held back
    assert out.add("/", "bonus") == events(("<", "draft"), ("/", "bonus"))  # third token: the limit
    assert out.done_reason == "length" and out.remaining == 0 and out.text == "a</"


def test_a_round_counts_several_tokens_at_once() -> None:
    out = Output(stop=[], max_tokens=4)
    out.add("ab", "standard", tokens=2)
    assert out.done_reason is None and out.remaining == 2
    out.add("cd", "standard", tokens=2)
    assert out.done_reason == "length" and out.tokens == 4


def test_no_limit_with_minus_one() -> None:
    out = Output(stop=[], max_tokens=-1)
    out.add("x" * 1000, "standard", tokens=1000)
    assert out.done_reason is None and out.remaining > 1_000_000


def test_end_releases_what_was_held_back() -> None:
    out = Output(stop=["</s>"], max_tokens=10)
    out.add("x </", "correction")
    assert out.end("stop") == events(("</", "correction"))
    assert out.done_reason == "stop" and out.text == "x </"
    assert out.end("length") == [] and out.done_reason == "stop"


def test_end_with_nothing_held() -> None:
    out = Output(stop=["</s>"], max_tokens=10)
    out.add("done", "standard")
    assert out.end("stop") == []
    assert out.text == "done" and out.done_reason == "stop"
