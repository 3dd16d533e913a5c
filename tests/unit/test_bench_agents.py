"""Agent sessions in the benchmark (prompts/agents.jsonl): loading and checking a session, its steps
and their history, each answer's kind, and the report's rows per kind of step and per session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from utils.bench.agents import CALL, FILE_WRITE, FINAL, STEP, step_kind
from utils.bench.report import PROJECT, report_markdown, sessions, summarize
from utils.bench.runner import BenchConfig, _history, load_prompts
from utils.engine.stats import AnswerStats

ROOT = Path(__file__).resolve().parents[2]
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
         for name in ("read_file", "write_file", "run_tests")]
SESSION = {"id": "s1", "category": "bugfix", "system": "You are a coding agent.", "tools": TOOLS,
           "task": "Fix f.py.", "results": [{"tool_name": "read_file", "content": "def f(): return 1\n"},
                                            {"tool_name": "run_tests", "content": "1 passed"}], "max_tokens": 64}


def _load(tmp_path: Path, *lines: dict) -> list[dict]:
    file = tmp_path / "agents.jsonl"
    file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return load_prompts(BenchConfig(prompts_file=file, target="t", drafters=[]))


def test_a_session_is_one_prompt_per_step_with_its_tools(tmp_path) -> None:
    steps = _load(tmp_path, SESSION)
    assert [(s["id"], s["category"], s["turn"], s["conversation"], s["kind"]) for s in steps] == [
        ("s1/1", STEP, 1, "s1", "bugfix"), ("s1/2", STEP, 2, "s1", "bugfix"), ("s1/3", STEP, 3, "s1", "bugfix")]
    assert steps[0]["said"] == [{"role": "system", "content": "You are a coding agent."},
                                {"role": "user", "content": "Fix f.py."}]
    assert steps[2]["said"] == [{"role": "tool", "tool_name": "run_tests", "content": "1 passed"}]
    assert all(s["tools"] == TOOLS and s["max_tokens"] == 64 and s["chat"] for s in steps)


def test_a_sessions_finish_asks_for_the_final_answer_after_the_last_result(tmp_path) -> None:
    steps = _load(tmp_path, {**SESSION, "finish": "Now summarize."})
    assert steps[2]["said"] == [{"role": "tool", "tool_name": "run_tests", "content": "1 passed"},
                                {"role": "user", "content": "Now summarize."}]
    assert steps[1]["said"] == [{"role": "tool", "tool_name": "read_file", "content": "def f(): return 1\n"}]


def test_each_step_follows_the_configurations_own_answers_and_the_scripted_results(tmp_path) -> None:
    steps = _load(tmp_path, SESSION)
    answers = ('{"name": "read_file", "arguments": {"path": "f.py"}}', '{"name": "run_tests", "arguments": {}}')
    runs = [{**step, "text": text, "repeat": 0, "engine": PROJECT, "drafter": "lookup", "k": "auto"}
            for step, text in zip(steps, answers, strict=False)]
    runs.append({**steps[0], "text": "another configuration's answer", "repeat": 0, "engine": PROJECT,
                 "drafter": "none", "k": "0"})
    messages = _history({"runs": runs}, steps[2], 0, (PROJECT, "lookup", "auto"))
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert messages[2]["content"] == answers[0] and messages[3]["content"] == "def f(): return 1\n"
    assert messages[4]["content"] == answers[1] and messages[5]["tool_name"] == "run_tests"


@pytest.mark.parametrize(("change", "problem"), [
    ({"results": [{"tool_name": "delete_repo", "content": "done"}]}, "result 1 is from 'delete_repo'"),
    ({"results": ["just text"]}, "result 1 is not {tool_name, content}"),
    ({"task": " "}, "the task is empty"),
    ({"system": None}, "missing system"),
    ({"finish": ["not", "text"]}, "finish is not a user message's text"),
])
def test_a_broken_session_is_reported_with_its_line(tmp_path, change: dict, problem: str) -> None:
    broken = {key: value for key, value in {**SESSION, **change}.items() if value is not None}
    with pytest.raises(ValueError, match=rf"agents.jsonl:2: .*{problem}"):
        _load(tmp_path, SESSION, broken)


def test_the_shipped_agent_sessions() -> None:
    sessions_ = [json.loads(line) for line in (ROOT / "prompts" / "agents.jsonl").read_text().splitlines()]
    assert len(sessions_) >= 8 and len({s["id"] for s in sessions_}) == len(sessions_)
    assert all(4 <= len(s["results"]) + 1 <= 8 and s["finish"] for s in sessions_)
    names = {tool["function"]["name"] for s in sessions_ for tool in s["tools"]}
    assert names == {"read_file", "write_file", "replace_in_file", "run_tests", "search"}
    results = [r for s in sessions_ for r in s["results"]]
    assert any("failed" in r["content"] for r in results) and any(" passed in " in r["content"] for r in results)
    files = [r["content"] for r in results if r["tool_name"] == "read_file" and r["content"].startswith('"""')]
    assert len(files) >= 6 and all(28 <= len(f.splitlines()) <= 80 for f in files)
    steps = load_prompts(BenchConfig(prompts_file=ROOT / "prompts" / "agents.jsonl", target="t", drafters=[]))
    assert len(steps) == sum(len(s["results"]) + 1 for s in sessions_)


@pytest.mark.parametrize(("text", "kind"), [
    ('{"name": "write_file", "arguments": {"path": "a.py", "content": "x = 1\\n"}}', FILE_WRITE),
    ('```json\n{\n  "name": "write_file",\n  "arguments": {\n    "path": "a.py",\n    "content": """\nx', FILE_WRITE),
    ('<tool_call>\n{"name": "write_file", "arguments": {"path": "a.py", "content": "x"}}\n</tool_call>', FILE_WRITE),
    ('{{"name": "write_file", "arguments": {"path": "a.py", "content": "x = ', FILE_WRITE),  # cut by max_tokens
    ('{"name": "write_file", "arguments": {"path": "a.py"}}', CALL),  # no content: not a file written
    ('```json\n{\n  "name": "read_file",\n  "arguments": {\n    "path": "stats.py"\n  }\n}\n```', CALL),
    ('```json\n{\n  "name": "run_tests"\n}\n```', CALL),
    ('```json\n{\n  "name": "read_file",\n', CALL),  # cut by max_tokens
    ('{"name": "replace_in_file", "arguments": {"path": "a.py", "old": "1", "new": "2", "content": "?"}}', CALL),
    ("I fixed median: it now sorts a copy of the values.", FINAL),
    ('The call was {"name": "write_file", "arguments": {"content": "x"}}.', FINAL),  # prose first: no call
    ('{"path": "a.py"}', FINAL),
])
def test_an_answer_is_a_file_write_another_call_or_a_final_answer(text: str, kind: str) -> None:
    assert step_kind(text) == kind


def _run(session: str, step: int, kind: str, drafter: str, seconds: float, text: str = "same") -> dict:
    """A run of 11 tokens: the first after 1 s, the other 10 in `seconds`."""
    stats = AnswerStats(mode="standard" if drafter == "none" else "speculative", target="t", output_tokens=11,
                        total_seconds=1.0 + seconds, time_to_first_token_s=1.0)
    stats.finish(stats.total_seconds)
    return {"prompt_id": f"{session}/{step}", "category": kind, "repeat": 0, "engine": PROJECT, "drafter": drafter,
            "k": "0" if drafter == "none" else "auto", "conversation": session, "turn": step, "text": text,
            "stats": stats.model_dump()}


# Two sessions. After the first token, standard then lookup seconds:
#   a: call 1 / 1, file write 4 / 1, final 1 / 2    b: call 2 / 1, file write 4 / 2 (answered differently)
STEPS = (("a", 1, CALL, 1, 1, "same"), ("a", 2, FILE_WRITE, 4, 1, "same"), ("a", 3, FINAL, 1, 2, "same"),
         ("b", 1, CALL, 2, 1, "same"), ("b", 2, FILE_WRITE, 4, 2, "differs"))
DATA = {"config": {"target": "t", "prompts_file": "prompts/agents.jsonl", "repeat": 1, "temperature": 0},
        "machine": {"platform": "p", "cores": 2}, "started": "now", "runs": [
            _run(session, step, kind, drafter, seconds, "same" if drafter == "none" else text)
            for session, step, kind, standard, lookup, text in STEPS
            for drafter, seconds in (("none", standard), ("lookup", lookup))]}


def test_speed_ups_per_kind_of_step_as_medians_and_aggregates() -> None:
    rows = {r["category"]: r for r in summarize(DATA)}
    assert set(rows) == {CALL, FILE_WRITE, FINAL, "all"}
    assert rows[CALL]["speedup"] == pytest.approx(1.5)  # 1 and 2: median 1.5; 3 s against 2 s
    assert rows[CALL]["aggregate"] == pytest.approx(1.5)
    assert rows[FILE_WRITE]["speedup"] == pytest.approx(3.0)  # 4 and 2
    assert rows[FILE_WRITE]["aggregate"] == pytest.approx(8 / 3)
    assert rows[FILE_WRITE]["identical_rate"] == 0.5
    assert rows[FINAL]["speedup"] == rows[FINAL]["aggregate"] == pytest.approx(0.5)
    assert rows["all"]["speedup"] == pytest.approx(2.0)  # 0.5 1 2 2 4
    assert rows["all"]["aggregate"] == pytest.approx(12 / 7)


def test_per_session_whole_time_and_the_whole_run_ratio() -> None:
    rows = {r["session"]: r for r in sessions(DATA)}
    # Whole times add each answer's first second: a 9 s against 7 s, b 8 s against 5 s.
    assert (rows["a"]["standard_s"], rows["a"]["speculative_s"], rows["a"]["identical"]) == (9, 7, 3)
    assert rows["a"]["whole"] == pytest.approx(9 / 7) and rows["a"]["after_first_token"] == pytest.approx(6 / 4)
    assert rows["b"]["whole"] == pytest.approx(8 / 5) and rows["b"]["identical"] == 1
    assert rows["all"]["whole"] == pytest.approx(17 / 12) and rows["all"]["steps"] == 5
    assert rows["all"]["median_whole"] == pytest.approx((9 / 7 + 8 / 5) / 2)


def test_a_sessions_wait_for_each_first_token_is_the_longer_one_charged_to_both() -> None:
    """The standard asked first and read the new prompt for 5 s; lookup then found it cached (0.1 s)."""
    cold, warm = _run("c", 1, CALL, "none", 4.0), _run("c", 1, CALL, "lookup", 2.0)
    warm["stats"] = {**warm["stats"], "time_to_first_token_s": 0.1, "total_seconds": 2.1}
    cold["stats"] = {**cold["stats"], "time_to_first_token_s": 5.0, "total_seconds": 9.0}
    [row, _] = sessions({"runs": [cold, warm]})
    assert (row["standard_s"], row["speculative_s"]) == (9.0, 7.0)  # 4 and 2 s, each with the 5 s read
    assert row["after_first_token"] == pytest.approx(2.0)


def test_a_session_missing_a_standard_step_is_left_out() -> None:
    runs = [r for r in DATA["runs"] if (r["prompt_id"], r["drafter"]) != ("b/2", "none")]
    assert [r["session"] for r in sessions({**DATA, "runs": runs})] == ["a", "all"]


def test_the_report_states_each_kind_and_session() -> None:
    report = report_markdown(DATA, summarize(DATA))
    assert "## By kind of turn: median (aggregate) speed-up after the first token" in report
    assert "| call | file write | final answer | all |" in report
    assert ("| project | lookup | auto | 1.50x (1.50x), 2 | 3.00x (2.67x), 2 | 0.50x (0.50x), 1 | 2.00x (1.71x), 5 |"
            in report)
    assert "| project | lookup | auto | a | 3 | 9.0 | 7.0 | 1.29x | 1.50x | 3/3 |" in report
    assert "| project | lookup | auto | all | 5 | 17.0 | 12.0 | 1.42x, median 1.44x | 1.71x | 4/5 |" in report
