"""The clairvoyant lookup bound (utils/bench/ceiling.py): the cheapest schedule through a known answer,
and its report by category (an agent step's kind) and by whole session."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from utils.bench.agents import CALL, FILE_WRITE, FINAL, session_steps
from utils.bench.ceiling import Bound, accepted_lengths, aggregate, node_prompts, report, served, standard_turns, whole
from utils.bench.overhead_measure import Row, Sample
from utils.bench.report import PROJECT
from utils.bench.runner import _history
from utils.bench.schedule import Tree, cheapest, cheapest_tree, eager, priced, shapes, tree_accepted
from utils.engine.drafters import NONE as STANDARD
from utils.engine.drafters.base import Branch, Draft
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


# -- trees (issue 43) -------------------------------------------------------------------------------

TREE = Draft(["a", "b", "c"], branches=[Branch(1, Draft(["x", "y"])), Branch(1, Draft(["z"]))])


def test_a_tree_follows_the_main_chain_then_the_branch_that_is_right_where_it_is_wrong() -> None:
    assert tree_accepted(TREE, ["a", "x", "y", "q"]) == (3, True)
    assert tree_accepted(TREE, ["a", "x", "q"]) == (2, True)
    assert tree_accepted(TREE, ["a", "z", "y"]) == (2, True)  # the other branch, one piece long
    assert tree_accepted(TREE, ["a", "b", "c", "d"]) == (3, False)  # the main chain all right: no branch
    assert tree_accepted(TREE, ["a", "b", "x"]) == (2, False)  # no branch parts at position 2
    assert tree_accepted(TREE, ["q", "x"]) == (0, False)  # the branches part at 1, not at 0
    assert tree_accepted(TREE, ["a"]) == (1, False)  # the answer ends


class TreeDrafter:
    """Proposes TREE wherever it is asked with a width, its main chain without."""

    async def propose(self, context: str, k: int, options: Any, width: int = 1) -> Draft:
        return (TREE if width > 1 else TREE.chain()).head(k)


async def test_the_table_keeps_what_each_head_of_the_tree_gets_accepted_and_its_rows() -> None:
    trees: list[list[Tree]] = []
    table = await accepted_lengths(TreeDrafter(), "", ["a", "x", "y"], 3, width=3, trees=trees)  # type: ignore[arg-type]
    assert table[0] == [1, 1, 1]  # the main chain: "a" only
    # head(1): "a" alone (the branches part at 1); head(2): "a b" with "x" and "z" at 1 (4 pieces);
    # head(3): "a b c" with "x y" and "z" (6 pieces), the path a x y all accepted.
    assert trees[0] == [Tree(1, 1, 0, False), Tree(2, 4, 2, True), Tree(3, 6, 2, True)]
    # Asked without a width, the same drafter gives the same chain table and no trees.
    assert await accepted_lengths(TreeDrafter(), "", ["a", "x", "y"], 3) == table  # type: ignore[arg-type]


# At 0 a tree of 2 + a branch of 1 (3 pieces) gets 2 accepted by its branch; the chain of 2 only 1.
ACCEPTED = [[1, 1], [], [], [], []]
TREES = [[Tree(1, 1, 0, False), Tree(2, 3, 1, True)], [], [], [], []]


def test_a_branch_right_where_the_chain_is_wrong_makes_the_tree_schedule_cheaper_when_rows_cost_little() -> None:
    # The chain: a draft of 1 (2 tokens for 1.5), then 3 standard: 4.5. The tree of 3 pieces costs 2.5
    # and yields 3 tokens, then 2 standard: 4.5 too, so the chain stays; with rows at 0.25 it wins.
    assert cheapest(ACCEPTED, 1.0, BURSTS) == (4.5, 1)
    assert cheapest_tree(ACCEPTED, TREES, 1.0, BURSTS, priced(BURSTS)) == (4.5, 1, 0)
    cheap = {1: 1.25, 2: 1.5, 3: 1.75, 4: 2.0}
    assert cheapest_tree(ACCEPTED, TREES, 1.0, cheap, priced(cheap)) == (3.75, 1, 1)
    assert cheapest(ACCEPTED, 1.0, cheap) == (4.25, 1)


def test_with_costly_rows_the_chain_schedule_wins() -> None:
    # As served the tree pays 1.0 more for its branch's own evaluation: the chain's schedule again.
    cheap = {1: 1.25, 2: 1.5, 3: 1.75, 4: 2.0}
    assert cheapest_tree(ACCEPTED, TREES, 1.0, cheap, priced(cheap, {1: 1.0})) == cheapest(ACCEPTED, 1.0, cheap) + (0,)


def test_a_tree_is_priced_by_its_rows_and_as_served_by_its_branches_too() -> None:
    price = priced(BURSTS, {1: 0.5, 2: 0.75})
    assert priced(BURSTS)(Tree(2, 3, 1, True)) == 2.5
    assert price(Tree(2, 3, 1, True)) == 3.0
    assert price(Tree(2, 4, 2, True)) == 3.75
    assert price(Tree(2, 4, 3, True)) == 3.0 + 0.375 * 3  # beyond the counts measured: 2 branches' share each
    assert price(Tree(2, 5, 1, True)) is None  # a burst of 5 was not measured


def test_a_trees_requests_are_its_main_chains_prefixes_then_each_branchs_after_its_stem() -> None:
    assert node_prompts("p", TREE) == ["p", "pa", "pab", "pabc", "pax", "paxy", "paz"]


def test_the_shapes_timed_as_served_are_a_middle_branch_of_1_2_or_4_or_width_minus_1_of_2() -> None:
    tokens = [str(n) for n in range(20)]
    trees = shapes(tokens, 8, 3)
    assert [(len(t), [(b.at, len(b.draft)) for b in t.branches]) for t in trees if len(t) in (4, 8)] == [
        (4, [(2, 1)]), (4, [(2, 2)]), (4, [(2, 2), (2, 2)]),  # a branch no deeper than the chain
        (8, [(4, 1)]), (8, [(4, 2)]), (8, [(4, 4)]), (8, [(4, 2), (4, 2)])]
    assert trees[-1].branches[0].draft.pieces == ["5", "6"]  # the answer's tokens from a little further on
    assert shapes(tokens[:3], 8, 3) == []  # too short an answer for a chain of 4


def test_what_a_tree_costs_as_served_above_a_chain_burst_of_its_rows() -> None:
    trees = [Draft(["a", "b"], branches=[Branch(1, Draft(["x"]))]),
             Draft(["a", "b", "c"], branches=[Branch(1, Draft(["x"])), Branch(1, Draft(["y"]))])]
    rows = {"burst3": Row("", [Sample(30.0, 25.0)]), "burst5": Row("", [Sample(40.0, 35.0)]),
            "tree0": Row("", [Sample(45.0, 38.0)]), "tree1": Row("", [Sample(60.0, 50.0)])}
    wall, engine, lines = served(rows, trees)
    assert (wall, engine) == ({1: 15.0, 2: 20.0}, {1: 13.0, 2: 15.0})
    assert lines[-2:] == [
        "  as served, a tree of 1 branch costs a chain burst of its rows +15.0 / +13.0 ms (median of 1 shapes)",
        "  as served, a tree of 2 branches costs a chain burst of its rows +20.0 / +15.0 ms (median of 1 shapes)"]


def test_width_1_reports_as_before_and_trees_beside_the_chain() -> None:
    # Costs in ms: a standard token 10 / 10; bursts of 1..3 pieces 12, 14, 16; the tree shape timed as
    # served (2 + a branch of 1) 26, 10 above a chain burst of its 3 rows.
    rows = {"standard": Row("standard", [Sample(10.0, 10.0)])}
    rows |= {f"burst{k}": Row(f"K={k}", [Sample(10.0 + 2 * k, 10.0 + 2 * k)]) for k in (1, 2, 3)}
    rows["tree0"] = Row("tree", [Sample(26.0, 26.0)])
    prompt = {"id": "c/1", "category": "edit", "conversation": "c"}
    chain = report(rows, [(prompt, ["a"] * 5, ACCEPTED)], "m", "suffix", 2, 1, [], True)
    timed = [Draft(["a", "b"], branches=[Branch(1, Draft(["x"]))])]
    lines = report(rows, [(prompt, ["a"] * 5, ACCEPTED, TREES)], "m", "suffix", 2, 1, [], True, timed, 3).splitlines()
    # Width 1 is today's report: its lines are the tree report's less the tree's.
    assert [line for line in chain.splitlines() if "burst, K=3" not in line] == [
        lines[0].replace(", trees of up to 2 branches", ""), *lines[1:4], lines[7][:66] + "  category",
        lines[8][:66] + "  edit", lines[9], lines[10], lines[15], lines[16]]
    # The chain: a draft of 1 (2 tokens for 12) then 3 standard: 50 for 42. The tree of 3 pieces for 16
    # yields 3 tokens, then 2 standard: 36 (1.39x); as served 26 + 20 = 46 (1.09x): the chain's 1.19x.
    assert lines[5:7] == [
        "  tree K=2 + 1 at 1      26.0 /   26.0, a chain burst of its 3 rows    16.0 /   16.0:  +10.0 /  +10.0",
        "  as served, a tree of 1 branch costs a chain burst of its rows +10.0 / +10.0 ms (median of 1 shapes)"]
    assert lines[8] == ("c/1                       5      1       1.19x   1.19x       1.14x      1.39x   1.39x     1/1"
                        "   1.19x   1.19x     0/1  edit")
    assert lines[11:15] == [
        "median, edit         tree, one evaluation: wall 1.39x, engine 1.39x (1 prompts), aggregate wall 1.39x",
        "median, all          tree, one evaluation: wall 1.39x, engine 1.39x (1 prompts), aggregate wall 1.39x",
        "median, edit         tree, as served: wall 1.19x, engine 1.19x (1 prompts), aggregate wall 1.19x",
        "median, all          tree, as served: wall 1.19x, engine 1.19x (1 prompts), aggregate wall 1.19x"]
    assert lines[-7:] == ["session c                    tree, one evaluation: aggregate wall 1.39x (1 turns)",
                          "sessions, tree, one evaluation: median wall 1.39x, aggregate wall 1.39x (1 sessions)",
                          "session c                    tree, as served: aggregate wall 1.19x (1 turns)",
                          "sessions, tree, as served: median wall 1.19x, aggregate wall 1.19x (1 sessions)",
                          "proposals: a branch at 1 of 5 positions, the target's path down one at 1",
                          "tree, one evaluation: 1 of 1 drafts went down a branch (100%)",
                          "tree, as served: 0 of 1 drafts went down a branch (0%)"]
