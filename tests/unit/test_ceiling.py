"""The clairvoyant lookup bound (utils/bench/ceiling.py): the cheapest schedule through a known answer,
and its report by category (an agent step's kind) and by whole session."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from utils.bench.agents import CALL, FILE_WRITE, FINAL, session_steps
from utils.bench.ceiling import Bound, accepted_lengths, aggregate, cheapest, eager, report, standard_turns, whole
from utils.bench.overhead_measure import Row, Sample
from utils.bench.report import PROJECT
from utils.bench.runner import _history
from utils.engine.drafters import NONE as STANDARD
from utils.engine.drafters.lookup import PromptLookupDrafter

BURSTS = {1: 1.5, 2: 2.0, 3: 2.5, 4: 3.0}  # in standard tokens


def test_no_draft_anywhere_costs_one_standard_token_per_token() -> None:
    assert cheapest([[], [], []], 1.0, BURSTS) == (3.0, 0)


def test_a_fully_accepted_draft_is_taken_when_it_is_cheaper() -> None:
    # At position 0 a draft of 4 is all accepted: 5 tokens for 3.0, then 1 standard token.
    accepted = [[1, 2, 3, 4]] + [[]] * 5
    assert cheapest(accepted, 1.0, BURSTS) == (4.0, 1)


def test_a_draft_that_is_rejected_is_never_taken() -> None:
    accepted = [[0, 0, 0, 0], [0], [], []]
    assert cheapest(accepted, 1.0, BURSTS) == (4.0, 0)


def test_the_best_k_is_chosen_not_the_longest() -> None:
    # Only the first 2 pieces are right: a draft of 2 (3 tokens for 2.0) beats 4 (3 tokens for 3.0).
    accepted = [[1, 2, 2, 2], [], [], [], []]
    assert cheapest(accepted, 1.0, BURSTS) == (4.0, 1)


def test_a_draft_past_the_answer_end_counts_only_the_tokens_left() -> None:
    # Two tokens left; a draft of 1 accepted yields both for 1.5 instead of 2.0.
    assert cheapest([[1], []], 1.0, BURSTS) == (1.5, 1)


@pytest.mark.asyncio
async def test_accepted_lengths_compare_each_proposal_with_what_follows() -> None:
    vocabulary = {"a", "b", "c", "ab", " "}
    drafter = PromptLookupDrafter(vocabulary, min_match=2, max_match=2)
    prompt = "ab c ab "  # after "ab " earlier came "c"
    table = await accepted_lengths(drafter, prompt, ["c", " ", "x"], 2)
    # At 0 the context ends "b ": lookup proposes "c", " " (both right); at 1 it ends " c" and
    # proposes " ", "ab" (first right); at 2 it ends "c " and proposes "ab", " " (wrong: "x" follows).
    assert table == [[1, 2], [1, 1], [0, 0]]


def test_the_eager_rule_drafts_wherever_the_drafter_found_something() -> None:
    # At 0 a draft of 2 with 1 accepted (2 tokens for 2.0), at 2 nothing (1.0), at 3 all of 1 (1.5).
    assert eager([[1, 1], [2], [], [1], []], 1.0, BURSTS) == 4.5


def test_a_session_is_its_turns_summed_and_all_sessions_their_turns_summed() -> None:
    # s1: 70 ms standard over 60 scheduled (1.17x); s2: 60 over 40 (1.50x). The median is 1.33x; all
    # turns together 130 over 100: 1.30x, weighed by time (not the mean of the sessions' speed-ups).
    sessions = {"s1": [Bound(1.33, 1.33, 1.33, 40.0, 30.0), Bound(1.0, 1.0, 1.0, 30.0, 30.0)],
                "s2": [Bound(1.5, 1.5, 1.5, 60.0, 40.0)]}
    assert whole(sessions) == ["session s1                   aggregate wall 1.17x (2 turns)",
                               "session s2                   aggregate wall 1.50x (1 turns)",
                               "sessions: median wall 1.33x, aggregate wall 1.30x (2 sessions)"]


def test_no_sessions_no_session_lines_and_no_time_no_aggregate() -> None:
    assert whole({}) == []
    assert aggregate([Bound(1.0, 1.0, 1.0, 0.0, 0.0)]) is None


def test_agent_steps_are_reported_by_their_kind_and_by_whole_session() -> None:
    # Costs in ms: a standard token 10 wall / 8 engine; bursts of K = 1 and 2: 15 / 12 and 20 / 16.
    rows = {"standard": Row("standard", [Sample(10.0, 8.0)]), "burst1": Row("K=1", [Sample(15.0, 12.0)]),
            "burst2": Row("K=2", [Sample(20.0, 16.0)])}

    def step(session: str, turn: int, kind: str) -> dict:
        return {"id": f"{session}/{turn}", "category": kind, "conversation": session, "turn": turn}
    answers = [
        (step("s1", 1, CALL), ["a"] * 4, [[1, 2], [], [], []]),  # a draft of 2 (3 tokens for 20), then 10: 30 for 40
        (step("s1", 2, FILE_WRITE), ["b"] * 3, [[], [], []]),  # nothing to draft: 30 for 30
        (step("s2", 1, FILE_WRITE), ["c"] * 6, [[1, 2], [], [], [1, 2], [], []]),  # two drafts: 40 for 60
    ]
    lines = report(rows, answers, "m", "suffix", 2, 1, [], True).splitlines()
    assert lines[-9:-6] == ["s1/1                      4      1       1.33x   1.33x       1.33x  call",
                            "s1/2                      3      0       1.00x   1.00x       1.00x  file write",
                            "s2/1                      6      2       1.50x   1.50x       1.50x  file write"]
    assert lines[-6:] == [
        "median, call         wall 1.33x, engine 1.33x, eager 1.33x (1 prompts), aggregate wall 1.33x",
        # File writes: the median of 1.00x and 1.50x; their times together 90 over 70.
        "median, file write   wall 1.25x, engine 1.25x, eager 1.25x (2 prompts), aggregate wall 1.29x",
        "median, all          wall 1.33x, engine 1.33x, eager 1.33x (3 prompts), aggregate wall 1.30x",
        "session s1                   aggregate wall 1.17x (2 turns)",
        "session s2                   aggregate wall 1.50x (1 turns)",
        "sessions: median wall 1.33x, aggregate wall 1.30x (2 sessions)",
    ]


class ScriptedServer:
    """A server that answers each rendered prompt with the next scripted answer, one token per character,
    and keeps what it was asked to render."""

    def __init__(self, answers: list[str]):
        self.answers, self.rendered = list(answers), []

    async def show(self, model: str) -> dict[str, Any]:
        return {"capabilities": ["completion", "tools"]}

    async def render_chat(self, model: str, messages: list[dict], options: dict, think: Any = None,
                          tools: list[dict] | None = None) -> str:
        self.rendered.append((messages, tools))
        return f"<prompt {len(self.rendered)}>"

    async def stream_raw(self, model: str, prompt: str, options: dict):
        yield SimpleNamespace(tokens=[SimpleNamespace(text=c) for c in self.answers.pop(0)])


async def test_an_agent_session_is_asked_step_by_step_as_bench_asks_it() -> None:
    tools = [{"type": "function", "function": {"name": name}} for name in ("read_file", "write_file")]
    session = {"id": "s", "category": "bugfix", "system": "Be an agent.", "tools": tools, "task": "Fix a.py.",
               "results": [{"tool_name": "read_file", "content": "x = 0"},
                           {"tool_name": "write_file", "content": "written"}]}
    said = ['{"name": "read_file", "arguments": {"path": "a.py"}}',
            '{"name": "write_file", "arguments": {"path": "a.py", "content": "x = 1"}}', "Fixed."]
    server = ScriptedServer(said)
    steps = [(prompt, text, "".join(tokens))
             async for prompt, text, tokens in standard_turns(server, "m", session_steps(session), 32)]
    # Each step reported by its answer's kind, the text seen being the one rendered for it.
    assert [(p["id"], p["category"], text, answer) for p, text, answer in steps] == [
        ("s/1", CALL, "<prompt 1>", said[0]), ("s/2", FILE_WRITE, "<prompt 2>", said[1]),
        ("s/3", FINAL, "<prompt 3>", said[2])]
    # The last step: the system prompt and the task, then each standard answer and its scripted result,
    # with the session's tools every time.
    assert server.rendered[-1] == ([
        {"role": "system", "content": "Be an agent."}, {"role": "user", "content": "Fix a.py."},
        {"role": "assistant", "content": said[0]}, {"role": "tool", "tool_name": "read_file", "content": "x = 0"},
        {"role": "assistant", "content": said[1]},
        {"role": "tool", "tool_name": "write_file", "content": "written"}], tools)
    assert all(used is tools for _, used in server.rendered)
    # The same messages as `bench` builds for its standard configuration from its saved runs.
    runs = [{"conversation": "s", "turn": p["turn"], "said": p["said"], "text": answer, "repeat": 0,
             "engine": PROJECT, "drafter": STANDARD, "k": "0"} for p, _, answer in steps[:2]]
    assert server.rendered[-1][0] == _history({"runs": runs}, steps[2][0], 0, (PROJECT, STANDARD, "0"))
