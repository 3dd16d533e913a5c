"""Tree verification on exact small trees: no model, no server (issue 43).

A tree is a main chain and branches (Draft.branches); the validator asks one request per node
(`node_prompts`) and follows the path the target's own tokens take (`_match`). The sampled-branch
rule is checked against the target's distribution by enumeration, and the tree policy's choice of
branches on hand-set costs.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from utils.engine.client import Step, Token
from utils.engine.controller import new_controller
from utils.engine.drafters import Branch, Draft
from utils.engine.tree_policy import Chains, MeasuredTrees, tree_policy
from utils.engine.validator import PromptPrefixValidator, Verdict, branch_rows, node_prompts
from utils.sampling import GREEDY


def step(text: str | None) -> Step:
    return Step(None if text is None else Token(text, None, {}), "length" if text is not None else "stop", 3)


# The context "c"; main chain A B C; a branch X Y at position 1 (instead of B C); one Z at position 0.
TREE = Draft(["A", "B", "C"], branches=[Branch(1, Draft(["X", "Y"])), Branch(0, Draft(["Z"]))])


def test_node_prompts_ask_every_node_once_and_share_the_trunk() -> None:
    assert node_prompts("c", TREE) == ["c", "cA", "cAB", "cABC", "cAX", "cAXY", "cZ"]
    assert TREE.rows == 6 and len(TREE) == 3
    assert branch_rows(TREE) == [(0, 4), (1, 6)]


def answers(table: dict[str, str | None]) -> list[Step]:
    """The target's token after each node's prompt, in `node_prompts` order."""
    return [step(table[prompt]) for prompt in node_prompts("c", TREE)]


def verdict_for(table: dict[str, str | None]) -> Verdict:
    return PromptPrefixValidator._match(answers(table), TREE, [None] * TREE.rows + [None])


ALL = {"c": "A", "cA": "B", "cAB": "C", "cABC": "D", "cAX": "Y", "cAXY": "W", "cZ": "Q"}


def test_greedy_follows_the_main_chain_where_the_target_does() -> None:
    verdict = verdict_for(ALL)
    assert verdict.pieces == [("A", "draft"), ("B", "draft"), ("C", "draft"), ("D", "bonus")]
    assert verdict.accepted == 3 and verdict.branch is None


def test_greedy_takes_the_deepest_agreeing_path_through_a_branch() -> None:
    verdict = verdict_for({**ALL, "cA": "X"})  # the target writes X where the main chain says B
    assert verdict.pieces == [("A", "draft"), ("X", "draft"), ("Y", "draft"), ("W", "bonus")]
    assert verdict.accepted == 3 and verdict.branch == 0


def test_a_branch_that_misses_later_ends_with_the_targets_correction() -> None:
    verdict = verdict_for({**ALL, "cA": "X", "cAX": "V"})
    assert verdict.pieces == [("A", "draft"), ("X", "draft"), ("V", "correction")]
    assert verdict.accepted == 2 and verdict.branch == 0


def test_a_branch_at_the_first_position() -> None:
    verdict = verdict_for({**ALL, "c": "Z"})
    assert verdict.pieces == [("Z", "draft"), ("Q", "bonus")] and verdict.branch == 1


def test_no_branch_matches_the_targets_token() -> None:
    verdict = verdict_for({**ALL, "cA": "M"})
    assert verdict.pieces == [("A", "draft"), ("M", "correction")] and verdict.branch is None


def test_the_end_of_text_inside_a_branch() -> None:
    verdict = verdict_for({**ALL, "cA": "X", "cAX": None})
    assert verdict.pieces == [("A", "draft"), ("X", "draft")] and verdict.ended


def test_a_partial_character_on_a_branch_resumes_with_that_nodes_seed() -> None:
    seeds = list(range(100, 107))
    steps = answers({**ALL, "cA": "X"})
    steps[4] = step("\ufffd")  # the node after A X: part of a character
    verdict = PromptPrefixValidator._match(steps, TREE, seeds)
    assert verdict.pieces == [("A", "draft"), ("X", "draft")] and verdict.resume_seed == 104


def test_head_keeps_the_branches_within_the_length_and_chain_drops_them() -> None:
    assert TREE.head(1) == Draft(["A"], branches=[Branch(0, Draft(["Z"]))])
    assert TREE.head(2).branches == [Branch(1, Draft(["X"])), Branch(0, Draft(["Z"]))]
    assert TREE.chain() == Draft(["A", "B", "C"])
    assert TREE.path(0) == ["A", "X", "Y"] and TREE.path(None) == ["A", "B", "C"]


async def test_verify_sends_one_request_per_node_in_one_burst() -> None:
    class Server:
        bursts: list[list[str]] = []

        async def next_tokens(self, model, prompts, options, top_logprobs=0, format=None):
            self.bursts.append(prompts)
            return [step({**ALL, "cA": "X"}[prompt]) for prompt in prompts]

    server = Server()
    verdict = await PromptPrefixValidator(server, "t").verify("c", TREE, GREEDY, "greedy", np.random.default_rng(0))
    assert server.bursts == [node_prompts("c", TREE)]
    assert verdict.branch == 0 and verdict.accepted == 3


# -- the sampled branch rule keeps the target's distribution --------------------------------------


def test_sample_match_on_a_tree_keeps_the_targets_distribution_exactly() -> None:
    """Each node samples with its own seed; the path reads one sample per position. Enumerating every
    combination of the nodes' samples, the first two emitted tokens have exactly the target's joint
    distribution, whatever the tree (here: main A B, branches X at 0 and Y at 1)."""
    vocabulary = "ABXY"
    rng = random.Random(3)
    # The target's next-token distribution after each context (made up, all different).
    weights = {prefix: [rng.random() for _ in vocabulary] for prefix in
               ["", *vocabulary, *("".join(p) for p in itertools.product(vocabulary, repeat=2))]}
    probs = {prefix: dict(zip(vocabulary, (w / sum(ws) for w in ws))) for prefix, ws in weights.items()}
    tree = Draft(["A", "B"], branches=[Branch(0, Draft(["X"])), Branch(1, Draft(["Y"]))])
    prompts = [p[len("c"):] for p in node_prompts("c", tree)]  # "", "A", "AB", "X", "AY"
    emitted: dict[str, float] = {}
    for samples in itertools.product(vocabulary, repeat=len(prompts)):
        chance = 1.0
        for prompt, sample in zip(prompts, samples):
            chance *= probs[prompt][sample]
        verdict = PromptPrefixValidator._match([step(s) for s in samples], tree, [None] * len(prompts))
        text = "".join(piece for piece, _ in verdict.pieces)[:2]
        if len(text) == 2:  # a correction at the first position is followed by standard sampling
            emitted[text] = emitted.get(text, 0.0) + chance
        else:
            for after, p in probs[text].items():
                emitted[text + after] = emitted.get(text + after, 0.0) + chance * p
    for first, second in itertools.product(vocabulary, repeat=2):
        assert emitted[first + second] == pytest.approx(probs[""][first] * probs[first][second], abs=1e-12)


# -- the tree policy -------------------------------------------------------------------------------


def controller_with(standard: float, verify: dict[int, float]):
    controller = new_controller(8, None, free=True)
    controller.cost.standard_seconds_per_token = standard
    controller.cost.verify_seconds = dict(verify)
    return controller


UNSURE = Draft(["A", "B", "C", "D"], confidence=[0.9, 0.5, 0.5, 0.5],
               branches=[Branch(1, Draft(["X", "Y"], confidence=[0.4, 0.9]))])


def test_the_default_policy_verifies_chains() -> None:
    policy = tree_policy(1)
    assert type(policy) is Chains and policy.width == 1
    assert policy.shape(UNSURE, controller_with(0.04, {4: 0.08})) == UNSURE.chain()


def test_a_branch_is_kept_where_its_rows_cost_little_and_dropped_where_they_cost_much() -> None:
    policy = tree_policy(3)
    assert isinstance(policy, MeasuredTrees) and policy.width == 3
    cheap = controller_with(0.040, {4: 0.060, 8: 0.070})  # 2.5 ms a row past 4
    assert policy.shape(UNSURE, cheap).branches == UNSURE.branches
    costly = controller_with(0.040, {4: 0.080, 8: 0.160})  # 20 ms a row
    assert policy.shape(UNSURE, costly).branches == []


def test_the_policy_learns_how_often_branches_are_taken_and_what_they_cost() -> None:
    policy = MeasuredTrees(3)
    controller = controller_with(0.040, {4: 0.060, 8: 0.070})
    before = policy.taken_rate()
    for _ in range(10):  # the main chain missed at 1 and the target never took the branch
        policy.record(UNSURE, 1, None, 0.064, controller)
    assert policy.missed == 10 and policy.taken == 0 and policy.taken_rate() < before
    assert policy.shape(UNSURE, controller).branches == []
    policy.record(UNSURE, 1, 0, 0.064 + 0.05, controller)  # taken, and at 50 ms more than the rows as a chain
    assert policy.taken == 1 and policy.extra_seconds is not None and policy.extra_seconds > 0.0
