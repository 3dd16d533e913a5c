"""The reasoning workload (prompts/reasoning.jsonl) as the benchmark reads it, its `think` passed on,
the reasoning of earlier turns sent back, a raw answer split, the stand-in's names, and the report's
section on reasoning and answer apart, on runs written by hand:

    project  function: 100 tokens, 60 of them reasoning; standard reasons 6 s then answers 4 s,
                       suffix 3 s then 2 s                                   -> 2.00x and 2.00x
             proof:    50 tokens, all reasoning (never closed, no content); standard 5 s, suffix 4 s
                                                                             -> 1.25x, no answer part
             all:      reasoning (6 + 5) / (3 + 4) = 1.57x, answer 4 / 2 = 2.00x, 110 and 40 tokens
    llama.cpp function: no token counts for the parts, nothing streamed     -> '-'
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.models import ROOT
from utils.bench.ceiling import report as ceiling_report
from utils.bench.overhead_measure import Row, Sample
from utils.bench.reasoning import split, think_problems, thinking_markdown, thinking_rows
from utils.bench.report import report_markdown, summarize
from utils.bench.runner import BenchConfig, _history, _request, load_prompts
from utils.bench.stand_in import REASONING_TEMPLATE, StandInError, ensure, stand_in, write_gguf

WORKLOAD = ROOT / "prompts" / "reasoning.jsonl"
STORED = Path(__file__).parent / "data" / "results.json"


def lines() -> list[dict]:
    return [json.loads(line) for line in WORKLOAD.read_text().splitlines() if line.strip()]


def test_the_workload_has_twelve_reasoning_prompts_of_four_kinds_and_conversations() -> None:
    plain = [line for line in lines() if "turns" not in line]
    talks = [line for line in lines() if "turns" in line]
    assert len(plain) >= 12
    kinds = {"function", "proof", "plan-edit", "choose"}
    assert {line["category"] for line in plain} == kinds
    assert all(sum(line["category"] == kind for line in plain) >= 3 for kind in kinds)
    assert len(talks) >= 3 and all(len(talk["turns"]) >= 3 for talk in talks)
    # `think` as a request field: true, absent and a level all occur
    values = [line.get("think", "absent") for line in lines()]
    assert True in values and "absent" in values and {"high", "medium"} & set(values)
    assert not [problem for line in lines() for problem in think_problems(line)]


def test_conversation_turns_carry_the_lines_think_and_reason_about_earlier_answers() -> None:
    prompts = load_prompts(BenchConfig(WORKLOAD, "stand-in-thinker:1.5b", ["suffix"]))
    assert len({p["id"] for p in prompts}) == len(prompts)
    by_line = {line["id"]: line for line in lines()}
    turns = [p for p in prompts if "conversation" in p]
    assert {p["category"] for p in turns} == {"turn 1", "turn 2", "turn 3"}
    for turn in turns:
        line = by_line[turn["conversation"]]
        assert turn.get("think", "absent") == line.get("think", "absent")
        assert turn["kind"] == "follow-up" and turn["max_tokens"] == line["max_tokens"]
    # a later turn asks about the answer before it
    later = [p["prompt"] for p in turns if p["turn"] > 1]
    assert all(any(word in text for word in ("your", "again", "Check", "Reason")) for text in later)


@pytest.mark.parametrize("think", [True, False, "high"])
def test_a_prompts_think_goes_with_its_request(think) -> None:
    config = BenchConfig(WORKLOAD, "stand-in-thinker:1.5b", ["suffix"])
    request = _request(config, {"id": "x", "category": "c", "prompt": "Why?", "think": think}, None, {})
    assert request.think == think
    assert request.as_ollama("m")[1]["think"] == think
    assert _request(config, {"id": "x", "category": "c", "prompt": "Why?"}, None, {}).think is None  # absent: absent


def test_a_bad_think_is_refused_with_its_line(tmp_path) -> None:
    prompts = tmp_path / "bad.jsonl"
    prompts.write_text(json.dumps({"id": "a", "category": "c", "prompt": "Why?", "think": True}) + "\n"
                       + json.dumps({"id": "b", "category": "c", "prompt": "Why?", "think": "loud"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: think must be true, false or one of high, medium, low, "
                                         r"max, not 'loud'"):
        load_prompts(BenchConfig(prompts, "stand-in-thinker:1.5b", ["suffix"]))


def test_an_earlier_answer_goes_back_with_its_reasoning() -> None:
    """As a client sends back the message Ollama returned: content, and `thinking` where there was some."""
    configuration = ("project", "suffix", "auto")
    earlier = {"prompt_id": "t/1", "conversation": "t", "turn": 1, "repeat": 0, "engine": "project",
               "drafter": "suffix", "k": "auto", "said": [{"role": "user", "content": "Work it out."}],
               "text": "def f(): pass", "thinking": "Plan: one function."}
    silent = {**earlier, "prompt_id": "t/2", "turn": 2, "said": [{"role": "user", "content": "Again."}],
              "text": "def g(): pass"}
    del silent["thinking"]
    now = {"id": "t/3", "conversation": "t", "turn": 3, "said": [{"role": "user", "content": "Check it."}]}
    messages = _history({"runs": [silent, earlier]}, now, 0, configuration)
    assert messages == [
        {"role": "user", "content": "Work it out."},
        {"role": "assistant", "content": "def f(): pass", "thinking": "Plan: one function."},
        {"role": "user", "content": "Again."},
        {"role": "assistant", "content": "def g(): pass"},
        {"role": "user", "content": "Check it."}]


def test_a_raw_answer_is_split_as_the_server_splits_it() -> None:
    prompt = "<|im_start|>assistant\n<think>\n"  # the stand-in's generation prompt, thinking on
    tags = ("<think>", "</think>")
    assert split("Plan it.\n</think>\n\nThe answer.", prompt, tags) == ("Plan it.\n", "The answer.")
    assert split("Still planning", prompt, tags) == ("Still planning", "")  # never closed: all reasoning
    assert split("Plan it.\n</think>\n\nThe answer.", prompt, None) == ("", "Plan it.\n</think>\n\nThe answer.")


def test_stand_ins_by_name_and_their_refusals(tmp_path) -> None:
    assert stand_in("stand-in-thinker:1.5b").base == "qwen2.5-coder:1.5b"
    assert stand_in("stand-in-thinker:0.5b").template == REASONING_TEMPLATE
    assert stand_in("qwen2.5-coder:1.5b") is None and stand_in("stand-in-thinker") is None
    with pytest.raises(StandInError, match="'qwen2.5-coder:1.5b' is not a stand-in; stand-ins: stand-in-thinker:1.5b"):
        ensure("http://127.0.0.1:9", "qwen2.5-coder:1.5b", tmp_path, tmp_path / "models")
    with pytest.raises(StandInError, match=r"built on qwen2.5-coder:1.5b, which is not installed: run "
                                           r"`python cli.py models install qwen2.5-coder:1.5b`"):
        write_gguf(tmp_path / "stand-ins", "qwen2.5-coder:1.5b", tmp_path / "no-models", REASONING_TEMPLATE)
    assert not (tmp_path / "stand-ins").exists()


def run(engine: str, drafter: str, prompt: str, category: str, text: str, stats: dict, **more) -> dict:
    return {"prompt_id": prompt, "category": category, "repeat": 0, "engine": engine, "drafter": drafter,
            "k": "auto" if drafter != "none" else "0", "target": "stand-in-thinker:1.5b", "text": text,
            "stats": {"output_tokens": 40, "total_seconds": 4.0, "tokens_per_second": 10.0, **stats}, **more}


def phases(thinking: float, content: float | None, end: float) -> dict:
    return {"phases": {"thinking_s": thinking, "content_s": content, "end_s": end}}


REASONED = {"config": {"target": "stand-in-thinker:1.5b", "prompts_file": "prompts/reasoning.jsonl", "repeat": 1,
                       "temperature": 0.0},
            "machine": {"cpu": "test", "platform": "test", "cores": 2}, "started": "now", "runs": [
    run("project", "none", "fn", "function", "code", {"output_tokens": 100, "thinking_tokens": 60},
        thinking="plan", **phases(1.0, 7.0, 11.0)),
    run("project", "suffix", "fn", "function", "code", {"output_tokens": 100, "thinking_tokens": 60},
        thinking="plan", **phases(1.0, 4.0, 6.0)),
    run("project", "none", "pf", "proof", "", {"output_tokens": 50, "thinking_tokens": 50},
        thinking="steps", **phases(0.5, None, 5.5)),
    run("project", "suffix", "pf", "proof", "", {"output_tokens": 50, "thinking_tokens": 50},
        thinking="steps", **phases(0.5, None, 4.5)),
    run("llama.cpp", "none", "fn", "function", "code", {}, thinking="plan"),
    run("llama.cpp", "suffix", "fn", "function", "code", {}, thinking="plan"),
]}


def test_reasoning_and_answer_tokens_and_speed_ups_apart() -> None:
    rows = {(r["engine"], r["category"]): r for r in thinking_rows(REASONED)}
    assert set(rows) == {("project", "function"), ("project", "proof"), ("project", "all"),
                         ("llama.cpp", "function"), ("llama.cpp", "all")}
    function, proof, every = rows["project", "function"], rows["project", "proof"], rows["project", "all"]
    assert [function[key] for key in ("runs", "answered", "thinking_tokens", "answer_tokens")] == [1, 1, 60, 40]
    assert function["thinking_speedup"] == pytest.approx(2.0) and function["answer_speedup"] == pytest.approx(2.0)
    assert (proof["answered"], proof["thinking_tokens"], proof["answer_tokens"]) == (0, 50, 0)
    assert proof["thinking_speedup"] == pytest.approx(1.25) and proof["answer_speedup"] is None
    assert (every["runs"], every["answered"], every["thinking_tokens"], every["answer_tokens"]) == (2, 1, 110, 40)
    assert every["thinking_speedup"] == pytest.approx(11 / 7) and every["answer_speedup"] == pytest.approx(2.0)
    native = rows["llama.cpp", "function"]
    assert (native["runs"], native["answered"]) == (1, 1)
    assert native["thinking_tokens"] is native["answer_tokens"] is native["thinking_speedup"] is None


def test_the_report_names_the_stand_in_and_shows_the_parts() -> None:
    report = report_markdown(REASONED, summarize(REASONED))
    assert "stand-in-thinker:1.5b is a STAND-IN thinking model: qwen2.5-coder:1.5b" in report
    assert "## Reasoning and answer apart" in report
    assert "| project | suffix | auto | all | 2 | 1 | 110 | 40 | 1.57x | 2.00x |" in report
    assert "| project | suffix | auto | proof | 1 | 0 | 50 | 0 | 1.25x | - |" in report
    assert "| llama.cpp | suffix | auto | function | 1 | 1 | - | - | - | - |" in report


def test_runs_without_reasoning_have_no_such_section() -> None:
    stored = json.loads(STORED.read_text())
    assert thinking_markdown(stored) == []
    report = report_markdown(stored, summarize(stored))
    assert "Reasoning and answer apart" not in report and "STAND-IN" not in report


def test_the_ceiling_reports_the_aggregate_beside_the_medians() -> None:
    """A standard token costs 1, a burst of any K 2. Answer a: 4 tokens, all drafted at once (one burst:
    2.00x); b and c: 2 and 8 tokens with nothing to draft (1.00x). Median 1.00x; aggregate, where the
    long answer weighs more: (4 + 2 + 8) / (2 + 2 + 8) = 1.17x."""
    rows = {"standard": Row("standard token", [Sample(1.0, 1.0)])}
    rows |= {f"burst{k}": Row(f"burst, K={k}", [Sample(2.0, 2.0)]) for k in (1, 2, 3)}
    drafted = [[1, 2, 3], [1, 2], [1], []]
    answers = [({"id": "a", "category": "c"}, ["x"] * 4, drafted),
               ({"id": "b", "category": "c"}, ["x"] * 2, [[], []]),
               ({"id": "c", "category": "c"}, ["x"] * 8, [[]] * 8)]
    text = ceiling_report(rows, answers, "m", "suffix", 3, 1, [], True)
    assert "median, all          wall 1.00x, engine 1.00x, eager 1.00x (3 prompts), aggregate wall 1.17x" in text


def test_identical_means_the_same_reasoning_too() -> None:
    """Two answers with the same content and different reasoning are not identical (nor is a run with
    reasoning identical to one without)."""
    runs = [run("project", "none", "a", "c", "code", {}, thinking="plan A"),
            run("project", "suffix", "a", "c", "code", {}, thinking="plan B"),
            run("project", "none", "b", "c", "code", {}, thinking="plan"),
            run("project", "suffix", "b", "c", "code", {}),
            run("project", "none", "d", "c", "code", {}, thinking="plan"),
            run("project", "suffix", "d", "c", "code", {}, thinking="plan")]
    rows = {r["category"]: r for r in summarize({**REASONED, "runs": runs})}
    assert rows["all"]["identical_rate"] == pytest.approx(1 / 3)


def test_prompts_that_ask_to_think_default_to_the_stand_in(tmp_path) -> None:
    from utils.bench.reasoning import default_target
    from utils.bench.stand_in import DEFAULT

    thinking, plain = tmp_path / "thinking.jsonl", tmp_path / "plain.jsonl"
    thinking.write_text('{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "y", "think": "high"}\n')
    plain.write_text('{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "y", "think": false}\n')
    assert default_target(thinking, "qwen2.5-coder:1.5b") == DEFAULT
    assert default_target(plain, "qwen2.5-coder:1.5b") == "qwen2.5-coder:1.5b"
    assert default_target(tmp_path / "missing.jsonl", "qwen2.5-coder:1.5b") == "qwen2.5-coder:1.5b"
