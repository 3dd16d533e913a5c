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
from utils.engine.draft import Branch, Draft  # noqa: F401 - drafters make both: the drafters' one import
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
