"""Chain or tree: which of a draft's branches a round verifies (tree verification, issue 43).

A drafter asked for a tree (`Drafter.propose(..., width)`) gives its main chain and side chains where
it knows other likely continuations (Draft.branches). Each branch piece is one row more to verify;
it pays only where the main chain misses at the branch's position and the target takes the branch,
which the controller cannot know in advance. One small policy object per controller decides, as
vLLM's `DraftLengthPolicy` pattern has it, with a do-nothing default:

- `Chains` (the default, `SPEC_TREE_WIDTH=1`): the main chain alone, as before trees existed. On this
  2-core CPU every row costs about a quarter to a third of a standard token, and the embedded server
  evaluates a branch's rows in a decode of their own (its KV cache keeps one stream per slot, so rows
  cannot share the prefix across sequences): docs/performance.md has what trees measured there.
- `Trees(width)`: every branch, as a fixed K verifies every piece (`--k`, the tests).
- `MeasuredTrees(width)`: keeps a branch where what it is expected to add beats what its rows cost.
  Expected: the main chain reaches the branch's position (the calibrated survival of the pieces
  before it) and misses there, the target then takes the branch (learned: of the branches whose
  position the main chain missed, the share the target took), and its further pieces survive as
  calibrated. Cost: the rows as a chain's (the cost model), plus what a branch was measured to add
  beyond that (its own decode on the embedded server; about nothing where rows share one evaluation).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from utils.engine.cost_model import CostModel, blend
from utils.engine.draft import Branch, Draft


class DraftLengthController(Protocol):
    """What a tree policy reads of the controller that holds it (controller.py)."""

    @property
    def cost(self) -> CostModel: ...

    def survival(self, confidence: float, trust: float = 1.0, source: str = "") -> float: ...

MARGIN = 1.02  # a branch must beat its cost by this factor: noise should not tip it (controller.MARGIN)
TAKEN_PRIOR = 0.3  # before any is measured, the share of branches the target takes where the chain misses
PRIOR_WEIGHT = 2  # ... worth this many measured branches


class Chains:
    """Chains only: a draft's branches are dropped. The default."""

    width = 1  # what the drafter is asked for: 1 is a chain

    def shape(self, draft: Draft, controller: DraftLengthController, trust: float = 1.0) -> Draft:
        """The draft to verify: here its main chain."""
        return draft.chain()

    def record(self, draft: Draft, main: int, branch: int | None, verify_seconds: float,
               controller: DraftLengthController) -> None:
        """A verified draft: `main` pieces of its main chain were kept, then `branch` was followed, if
        any (the decoder's reading of the verdict); a chain policy learns nothing."""


class Trees(Chains):
    """Every branch the drafter gives, up to width - 1: what a fixed K does (verified whole, whatever
    it costs), and how the tests have trees verified on every round."""

    def __init__(self, width: int):
        self.width = width

    def shape(self, draft: Draft, controller: DraftLengthController, trust: float = 1.0) -> Draft:
        return draft


class MeasuredTrees(Trees):
    """Up to width - 1 branches a round, each kept where it is measured to pay (module docstring)."""

    def __init__(self, width: int):
        super().__init__(width)
        self.missed = 0  # branches whose position the main chain reached and missed
        self.taken = 0  # of those, the ones the target took
        self.extra_seconds: float | None = None  # what a branch costs beyond its rows as a chain's

    def taken_rate(self) -> float:
        return (self.taken + TAKEN_PRIOR * PRIOR_WEIGHT) / (self.missed + PRIOR_WEIGHT)

    def shape(self, draft: Draft, controller: DraftLengthController, trust: float = 1.0) -> Draft:
        standard = controller.cost.standard_seconds_per_token
        if not draft.branches or standard is None:
            return draft.chain()
        survive = [controller.survival(c, trust, draft.source) for c in draft.confidence] or [0.5] * len(draft)
        kept, rows = [], len(draft)
        expected = [(self._tokens(branch, survive, controller, trust), branch) for branch in draft.branches]
        for tokens, branch in sorted(expected, key=lambda pair: -pair[0]):
            cost = controller.cost
            extra = cost.verify_cost(rows + len(branch.draft)) - cost.verify_cost(rows) + (self.extra_seconds or 0.0)
            if tokens * standard > extra * MARGIN:
                kept.append(branch)
                rows += len(branch.draft)
        return replace(draft, branches=kept)

    def _tokens(self, branch: Branch, survive: list[float], controller: DraftLengthController, trust: float) -> float:
        """The tokens a branch is expected to add: the chain reaches its position and misses, the
        target takes its first piece, then each further piece survives as calibrated."""
        reach = 1.0
        for value in survive[: branch.at]:
            reach *= value
        run, last = 1.0, 1.0
        for confidence in branch.draft.confidence[1:]:
            last *= controller.survival(confidence, trust, branch.draft.source)
            run += last
        return reach * (1 - survive[branch.at]) * self.taken_rate() * run

    def record(self, draft: Draft, main: int, branch: int | None, verify_seconds: float,
               controller: DraftLengthController) -> None:
        """What the target took, and what the branches cost beyond their rows as a chain's."""
        for number, each in enumerate(draft.branches):
            if each.at == main and main < len(draft):
                self.missed += 1
                self.taken += number == branch
        if draft.branches and controller.cost.verify_seconds:
            as_chain = controller.cost.verify_cost(draft.rows)
            extra = max(verify_seconds - as_chain, 0.0) / len(draft.branches)
            self.extra_seconds = blend(self.extra_seconds, extra)


def tree_policy(width: int, fixed: bool = False) -> Chains:
    """The policy for `SPEC_TREE_WIDTH`: chains at 1; above, measured trees, or every branch with a
    fixed K (`fixed`)."""
    if width <= 1:
        return Chains()
    return Trees(width) if fixed else MeasuredTrees(width)
