"""The drafter interface and registry. A drafter proposes up to K text pieces and learns from the verdict.

A new draft source is one class in one file of this package: it subclasses `Drafter`, declares what
it can do (its name or that it is named by a draft model, whether its pieces carry the target's
probabilities, llama.cpp's equivalent for the benchmark's anchor) and builds itself in `create`.
Defining the class registers it; the package imports every module in it. The validator, the
decoding loop, the app's drafter picker and the benchmark never look inside a drafter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from utils.engine.config import EngineConfig
from utils.engine.memory import EngineMemory
from utils.engine.target import Target
from utils.sampling import GREEDY, SamplingOptions

NONE = "none"  # the drafter choice that means standard generation
# An answer whose first draft is this many pieces long begins by copying (Drafter.copies): a draft
# as long as the controller's chain (controller.CHAIN_K). "Write a Fibonacci function", then "Rename
# it and show it again": the suffix drafter's draft after the second prompt is the first answer's
# first 9 pieces; the prompt's own end matched earlier text over 8 pieces only (the chat template's).
COPY_PIECES = 8


@dataclass
class Draft:
    pieces: list[str] = field(default_factory=list)
    # For rejection sampling: the draft's top log-probabilities at each position (raw, as Ollama gives).
    top_logprobs: list[dict[str, float]] = field(default_factory=list)
    # The drafter's own estimate, in [0, 1], that each piece survives if the ones before it did (a
    # draft model's probability, a suffix tree's count ratio); the controller learns how far to trust
    # it (controller.py `cut`). Empty: the drafter has no estimate, and only the position counts.
    confidence: list[float] = field(default_factory=list)
    # Where a drafter with several sources found it (the suffix drafter: "answer" for this answer's own
    # tree, "shared" for earlier answers'): the controller calibrates each source's confidences apart.
    source: str = ""
    # Other continuations the drafter finds likely (a tree: tree verification, issue 43). Empty: a chain.
    branches: list[Branch] = field(default_factory=list)

    def __len__(self) -> int:
        """The main chain's pieces (the draft length K); `rows` counts the branches' pieces too."""
        return len(self.pieces)

    @property
    def rows(self) -> int:
        """Pieces to verify, every branch's included: a tree of R pieces is R + 1 one-token requests."""
        return len(self.pieces) + sum(len(branch.draft) for branch in self.branches)

    def head(self, length: int) -> Draft:
        """The first `length` pieces, with what goes with them: the branches that part from them, no
        deeper than `length` either."""
        branches = [Branch(b.at, b.draft.head(length - b.at)) for b in self.branches if b.at < min(length, len(self))]
        return Draft(self.pieces[:length], self.top_logprobs[:length], self.confidence[:length], self.source,
                     branches)

    def chain(self) -> Draft:
        """The main chain alone."""
        return Draft(self.pieces, self.top_logprobs, self.confidence, self.source)

    def path(self, branch: int | None) -> list[str]:
        """The pieces along the main chain, or along branch number `branch` (the main chain up to it)."""
        if branch is None:
            return self.pieces
        at = self.branches[branch].at
        return self.pieces[:at] + self.branches[branch].draft.pieces

    def graded(self, text: str) -> tuple[int, int]:
        """Held against `text`, what the target wrote after it was proposed: (accepted, decided), the
        pieces the text goes on with, then one more if the text contradicts the next (one it has not
        reached yet is undecided). As text: where the target splits the same text into other tokens
        the validator would reject what counts as accepted here, a small error in an estimate."""
        position = accepted = 0
        for piece in self.pieces:
            if not text.startswith(piece, position):
                break
            position += len(piece)
            accepted += 1
        rejected = accepted < len(self.pieces) and not self.pieces[accepted].startswith(text[position:])
        return accepted, accepted + rejected


@dataclass
class Branch:
    """Another continuation of a draft: `draft`'s pieces instead of the main chain's from position
    `at` on (at < the main chain's length). Its first piece differs from the main chain's piece there
    and from every other branch's at the same position; its confidences are as the main chain's (the
    first: how likely the target writes that piece at `at`). A branch has no branches of its own: a
    tree here is a main chain and side chains, each verified a row per piece."""

    at: int
    draft: Draft


@dataclass
class DraftSetup:
    """What a drafter may need to build itself for one target."""

    target: Target
    target_model: str
    draft_server: Target  # where a draft model is served: the target's server unless told otherwise
    config: EngineConfig
    # What drafters learn from earlier answers (suffix) is kept in the decoder owner's memory: a
    # benchmark gives each configuration its own, so that one configuration does not draft from
    # another's answer to the same prompt.
    memory: EngineMemory = field(default_factory=EngineMemory)


class Drafter:
    """The interface: propose a draft for `context`, then learn how much of it was accepted."""

    # -- what a drafter class declares --------------------------------------------------------------
    kind: ClassVar[str | None] = None  # the choice that selects it ("lookup"); None: chosen by a model's name
    description: ClassVar[str] = ""  # one line for pickers
    # True when its pieces come with the draft's own distribution over the target's tokens: then, with
    # sampling, the validator may use rejection sampling instead of sample-match.
    exact_distribution: bool = False
    # True when proposing costs no model call (microseconds): the decoder may then ask for a draft
    # at every step and verify it only where the draft's confidence says it pays.
    free: ClassVar[bool] = False

    name: str = NONE  # what the statistics call it: its kind, or the draft model's name

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        _REGISTRY.append(cls)

    @classmethod
    async def create(cls, choice: str, setup: DraftSetup) -> Drafter:
        """A drafter for `choice`; raises ServerError with the server's message if it cannot draft."""
        raise NotImplementedError

    @classmethod
    def llama_server_args(cls, k: str, model_path: Path | None) -> list[str] | None:
        """llama-server's arguments for the same kind of drafting ("auto" or a fixed K), or None."""
        return None

    # -- what a drafter does ------------------------------------------------------------------------
    async def propose(self, context: str, k: int, options: SamplingOptions, width: int = 1) -> Draft:
        """Up to `k` pieces that may follow `context`; greedy `options` ask for the likeliest ones.
        `width` > 1 asks for a tree: up to width - 1 branches (`Draft.branches`) where the drafter
        knows other likely continuations; a drafter that knows none gives a chain."""
        raise NotImplementedError

    def update(self, draft: Draft, accepted: int) -> None:
        """Called after every verification; most drafters learn nothing here."""

    def finish(self, prompt: str, output: str) -> None:
        """Called once an answer is complete, with its prompt and all it generated; most forget it."""

    async def prepare(self) -> float:
        """Make ready to draft before an answer's rounds are timed (a draft model loaded, where its
        server has unloaded it): the seconds that took. A load timed as a draft would have the
        controller write drafting off (a cold draft model's first draft: 2.5 s). Most need nothing."""
        return 0.0

    async def copies(self, context: str) -> bool:
        """Whether an answer after `context` would begin by copying: a free drafter's own draft there is
        COPY_PIECES long (a follow-up that shows an earlier answer's function again begins as that
        answer did). Asked before an answer that the controller would send standard (`start_answer`),
        which then retries speculation for it. A draft model cannot tell without drafting (a model
        call, and perhaps a load): False."""
        if not self.free:
            return False
        return len(await self.propose(context, COPY_PIECES, GREEDY)) >= COPY_PIECES


_REGISTRY: list[type[Drafter]] = []


def drafter_class(choice: str) -> type[Drafter]:
    """The class that serves `choice`: the one of that kind, else the one named by a draft model."""
    named = {cls.kind: cls for cls in _REGISTRY if cls.kind}
    if choice in named:
        return named[choice]
    by_model = [cls for cls in _REGISTRY if cls.kind is None]
    if not by_model:
        raise LookupError(f"no drafter serves '{choice}'")
    return by_model[-1]


def model_free_drafters() -> dict[str, str]:
    """The drafters that need no draft model, by choice name, with their descriptions."""
    return {cls.kind: cls.description for cls in _REGISTRY if cls.kind}


async def build_drafter(choice: str, setup: DraftSetup) -> Drafter | None:
    """The drafter for a choice: "none" (standard generation), a drafter's kind, or a draft model."""
    if not choice or choice == NONE:
        return None
    return await drafter_class(choice).create(choice, setup)
