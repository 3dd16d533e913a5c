"""The thinking parser (a port of Ollama's thinking/parser.go), `think` as Ollama reads it, and model
parameters in Ollama's text forms; no model, no server."""

from __future__ import annotations

import pytest

from utils.api.http import ApiError
from utils.api.schemas import Options
from utils.embedded.http.thinking import splitter, think_mode
from utils.embedded.store.parameters import ParameterError, checked, from_text, modelfile_lines, show_text
from utils.thinking import ThinkingParser

QWEN3 = "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>{% endif %}"


def split(*pieces: str, prompt: str = "") -> tuple[str, str]:
    parser = splitter(True, prompt)
    results = [parser.add(piece) for piece in pieces]
    return "".join(t for t, _ in results), "".join(c for _, c in results)


@pytest.mark.parametrize("pieces, expected", [
    (["<think>I add.</think>\n\n8"], ("I add.", "8")),
    (["  \n<th", "ink>\n", " I add.", "</th", "ink>", "\n", "\n8"], ("I add.", "8")),  # tags across pieces
    (["  8 is the answer"], ("", "  8 is the answer")),  # no tag: all content, its whitespace kept
    (["<think>still thinking"], ("still thinking", "")),
    (["<think>a</think>b</think>c"], ("a", "b</think>c")),  # one thinking block, at the start
])
def test_the_parser_splits_as_ollamas(pieces, expected):
    assert split(*pieces) == expected
    assert split("".join(pieces)) == expected  # whole or in pieces: the same


def test_a_prompt_that_opens_the_tag_starts_inside_it_and_a_partial_tag_is_held():
    parser = splitter(True, "<|im_start|>assistant\n<think>\n")
    assert parser.add("I add</th") == ("I add", "")
    assert parser.add("ink>\n\n") == ("", "")
    assert parser.add("8") == ("", "8")
    assert splitter(False, "<think>\n") is None and splitter(None, "") is None
    assert isinstance(splitter(True, "no tag"), ThinkingParser)


def test_think_values_as_ollama_reads_them():
    assert [think_mode("m", QWEN3, value) for value in (None, True, False, "low", "max")] == [True, True, False,
                                                                                           True, True]
    assert think_mode("m", "{{ messages }}", False) is None and think_mode("m", None, None) is None
    for template, value, words in ((None, True, '"m" does not support thinking'),
                                   (None, "high", "does not support thinking"),
                                   (QWEN3, "loud", "invalid think value"), (QWEN3, 1, "think must be a boolean")):
        with pytest.raises(ApiError) as refused:
            think_mode("m", template, value)
        assert refused.value.status == 400 and words in refused.value.message


def test_parameters_in_ollamas_text_forms():
    parameters = from_text([("temperature", "0"), ("stop", "def "), ("stop", "<|im_end|>"), ("num_ctx", "8192"),
                            ("seed", "1234567"), ("top_p", "0.00001"), ("use_mmap", "false")])
    assert show_text(parameters).splitlines() == [
        "num_ctx                        8192", "seed                           1.234567e+06",
        'stop                           "def "', 'stop                           "<|im_end|>"',
        "temperature                    0", "top_p                          1e-05",
        "use_mmap                       false"]
    assert modelfile_lines({"stop": ["def ", "<|im_end|>"], "top_k": 5}) == [
        'PARAMETER stop "def "', "PARAMETER stop <|im_end|>", "PARAMETER top_k 5"]
    assert checked({"stop": "x", "num_ctx": 2048.0, "seed": None}) == {"stop": ["x"], "num_ctx": 2048}
    for bad, words in (({"colour": 1}, "unknown parameter 'colour'"), ({"top_k": 1.5}, "integer"),
                       ({"use_mmap": 1}, "boolean"), ({"stop": [1]}, "array of strings"), ({"min_p": "x"}, "float")):
        with pytest.raises(ParameterError, match=words):
            checked(bad)
    with pytest.raises(ParameterError, match=r"invalid float value \[warm\]"):
        from_text([("temperature", "warm")])


def test_sent_options_go_over_the_models_parameters():
    model = {"temperature": 0.0, "stop": ["def "], "num_ctx": 8192}
    assert Options().under(model).sampling().temperature == 0.0 and Options().under(model).stops() == ["def "]
    sent = Options.model_validate({"temperature": 0.5, "stop": []}).under(model)
    assert (sent.temperature, sent.stops(), sent.num_ctx, sent.top_k) == (0.5, [], 8192, 40)
    plain = Options()
    assert plain.under({}) is plain
