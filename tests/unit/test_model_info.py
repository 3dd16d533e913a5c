"""What a model's own parameters make of a request, as Ollama merges them (its defaults < the
Modelfile < the request), and what the engine decides from that, on exact small examples. The
parameters text is the one a real Ollama 0.32.15 answered (tests/data/ollama-recorded/18)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from utils.engine.client import _context_full
from utils.engine.model_info import ModelInfo, parse_parameters
from utils.engine.planning import FORMAT_REASON, standard_reason, thinks
from utils.engine.request import GenerationRequest
from utils.sampling import SamplingOptions

RECORDED = Path(__file__).resolve().parents[1] / "data" / "ollama-recorded"


def recorded_parameters() -> str:
    return json.loads((RECORDED / "18-show-model-with-parameters.response").read_text())["parameters"]


def test_parameters_are_read_from_ollamas_own_text() -> None:
    assert parse_parameters(recorded_parameters()) == {"num_ctx": 8192, "stop": ["def "], "temperature": 0}
    text = 'stop                           "<|im_end|>"\nstop                           "a \\"b\\""\ntop_p 0.5\n'
    assert parse_parameters(text) == {"stop": ["<|im_end|>", 'a "b"'], "top_p": 0.5}
    assert parse_parameters("") == {}


def test_the_models_parameters_sit_under_the_request_and_over_ollamas_defaults() -> None:
    greedy = ModelInfo("q05-greedy", parameters=parse_parameters(recorded_parameters()))
    assert greedy.sampling({}).greedy  # the Modelfile's temperature 0: greedy when the client sends none
    assert greedy.sampling({}).top_k == 40  # Ollama's default where neither sets it
    assert greedy.sampling({"temperature": 0.7}) == SamplingOptions(0.7, 40, 0.9, 0.0, None)
    assert greedy.stops({}) == ["def "]  # the model's stop applies...
    assert greedy.stops({"stop": ["\n\n"]}) == ["\n\n"]  # ...unless the request has its own (replaced, not joined)
    assert greedy.sampling({"temperature": None}).greedy  # null is unset, as Ollama reads it
    plain = ModelInfo("plain")
    assert plain.sampling({}) == SamplingOptions()  # Ollama's defaults: temperature 0.8, top_k 40, top_p 0.9
    assert plain.sampling({"temperature": 1e-9}).greedy  # below Ollama's threshold, greedy


def test_parameters_that_change_token_choice_are_named() -> None:
    penalised = ModelInfo("m", parameters={"repeat_penalty": 1.3, "num_ctx": 8192, "temperature": 0.2,
                                           "mirostat": 2, "num_thread": 4})
    assert penalised.inexact_parameters() == ["mirostat", "repeat_penalty"]
    code, reason = standard_reason(penalised, None, None)
    assert code == "parameters" and "mirostat, repeat_penalty" in reason
    assert standard_reason(ModelInfo("m", parameters={"num_ctx": 8192, "stop": ["x"]}), None, None) is None


@pytest.mark.parametrize(("think", "thinking"), [(None, True), (True, True), ("high", True), (False, False),
                                                  ("false", False)])
def test_a_thinking_model_thinks_unless_asked_not_to(think, thinking) -> None:
    model = ModelInfo("qwen3", capabilities=("completion", "thinking"))
    assert thinks(model, think) is thinking
    assert standard_reason(model, None, think) is None  # split as upstream splits it: speculated
    own = "Ollama parses this model's answers with its built-in parser qwen3"
    assert (standard_reason(model, None, think, thinking_parser=own) or ("",))[0] == ("thinking" if thinking else "")
    plain = ModelInfo("qwen2.5", capabilities=("completion",))
    assert not thinks(plain, None) and not thinks(plain, False)
    assert thinks(plain, True)  # asked of a model without thinking: upstream's own 400, not a silent answer
    assert (standard_reason(plain, None, True) or ("",))[0] == "thinking"


def test_format_is_named_before_anything_but_tools_and_thinking() -> None:
    model = ModelInfo("qwen3", capabilities=("thinking",), parameters={"repeat_penalty": 1.2})
    assert standard_reason(model, "json", False) == ("format", FORMAT_REASON)
    code, reason = standard_reason(model, "json", None)  # Ollama constrains the content after the reasoning
    assert code == "thinking" and "second pass" in reason
    assert standard_reason(model, "json", None, constrains=True)[0] == "thinking"


def test_a_request_sends_only_what_the_client_gave() -> None:
    request = GenerationRequest(messages=[{"role": "user", "content": "hi"}], options={"num_ctx": 8192},
                                max_tokens=20, think=False)
    assert request.options == {"num_ctx": 8192}  # no temperature, top_k, ... of the engine's
    assert request.as_ollama("m") == (True, {"model": "m", "options": {"num_ctx": 8192, "num_predict": 20},
                                             "think": False, "messages": [{"role": "user", "content": "hi"}]})
    with_stop = GenerationRequest(prompt="x", raw=True, options={"num_predict": 5}, stop=["\n"])
    assert with_stop.options == {"stop": ["\n"]}  # num_predict is the engine's, per request
    assert with_stop.raw_options == {"stop": []}  # the engine applies stops itself, upstream none
    assert GenerationRequest(prompt="x", stop=[]).options == {"temperature": 0}  # no stop: the model's stays
    assert GenerationRequest(prompt="x", options=SamplingOptions(0.5, 10, 1.0, 0.0, 3)).options == {
        "temperature": 0.5, "top_k": 10, "top_p": 1.0, "min_p": 0.0, "seed": 3}


def test_context_full_is_recognised_in_each_wording() -> None:
    recorded = json.loads((RECORDED / "21-chat-context-full-truncate-false.response").read_text())["error"]
    assert _context_full(recorded)  # llama-server's JSON inside Ollama 0.30+'s error
    assert _context_full("input length exceeds the context length")  # Ollama's Go engine
    assert not _context_full('"qwen2.5-coder:0.5b" does not support thinking')
