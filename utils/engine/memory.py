"""What the engine learns from one answer for the next, in one object its owner passes in.

Whoever runs a series of answers creates one `EngineMemory` and hands it to every decoder it builds
(build_decoder): the proxy's state, the app's runtime, `cli.py generate`, each benchmark
configuration. Answers that share it share what they learned: the controllers (what drafting and
verifying cost on a server, what drafts proved worth), the suffix drafter's earlier answers, the
targets' vocabularies and whether a server can verify drafts at all. Two owners never see each
other's; a test starts from a new one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from utils.engine.controller import DraftLengthController, new_controller
from utils.engine.pieces import Pieces
from utils.engine.tree_policy import tree_policy


@dataclass(eq=False)
class EngineMemory:
    controllers: dict[tuple, DraftLengthController] = field(default_factory=dict)
    # drafters/suffix.py's stores of finished answers, per target (typed there: it imports this module).
    suffix_stores: dict[str, Any] = field(default_factory=dict)
    # (server, model) -> (the tokenizer's fingerprint, its pieces): tokenizers.vocabulary.
    vocabularies: dict[tuple[str, str], tuple[str, Pieces]] = field(default_factory=dict)
    # (server, model) -> why drafts cannot be verified there, or None: planning.verification_gate.
    gates: dict[tuple[str, str], str | None] = field(default_factory=dict)
    # (server, model) -> answers in progress there: the load the controllers' costs are measured under.
    answering: Counter[tuple[str, str]] = field(default_factory=Counter)

    def controller(self, key: tuple, k_max: int, fixed_k: int | None, free: bool,
                   tree_width: int = 1) -> DraftLengthController:
        """One controller per (server, target, drafter, method, k_max, fixed K, tree width), so that
        what one answer learned helps the next."""
        full_key = (*key, k_max, fixed_k, tree_width)
        if full_key not in self.controllers:
            controller = self.controllers[full_key] = new_controller(k_max, fixed_k, free)
            controller.trees = tree_policy(tree_width, fixed=fixed_k is not None)
        return self.controllers[full_key]
