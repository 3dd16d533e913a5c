"""The drafter registry: defining a Drafter subclass registers it; choices resolve to classes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import utils.engine.drafters.base as base
from utils.engine.config import EngineConfig
from utils.engine.drafters import NONE, Draft, Drafter, DraftSetup, build_drafter, drafter_class, model_free_drafters
from utils.engine.drafters.lookup import PromptLookupDrafter
from utils.engine.drafters.model import ModelDrafter
from utils.engine.drafters.suffix import SuffixDrafter
from utils.sampling import GREEDY, SamplingOptions


@contextmanager
def isolated_registry() -> Iterator[list[type[Drafter]]]:
    """A copy of the registry while it lasts, so the classes defined meanwhile do not outlive it."""
    with pytest.MonkeyPatch.context() as patch:
        copy = list(base._REGISTRY)
        patch.setattr(base, "_REGISTRY", copy)
        yield copy


@pytest.fixture
def registry() -> Iterator[list[type[Drafter]]]:
    """A copy of the registry for one test."""
    with isolated_registry() as copy:
        yield copy


def setup() -> DraftSetup:
    return DraftSetup(target=None, target_model="target", draft_server=None, config=EngineConfig())  # type: ignore[arg-type]


def test_the_packaged_drafters_are_registered() -> None:
    assert drafter_class("lookup") is PromptLookupDrafter
    # Anything that is not a drafter's kind is a draft model's name.
    assert drafter_class("qwen2.5-coder:0.5b") is ModelDrafter
    assert drafter_class("smollm2:135m") is ModelDrafter
    # Exactly the packaged drafters that need no model, each with its description: the draft model's
    # class (chosen by a model's name, no kind) is not among them, under None or any other name.
    assert model_free_drafters() == {"lookup": PromptLookupDrafter.description,
                                     "suffix": SuffixDrafter.description}
    assert ModelDrafter.description not in model_free_drafters().values()


async def test_a_new_drafter_class_registers_itself(registry: list[type[Drafter]]) -> None:
    before = len(registry)

    class EchoDrafter(Drafter):
        """Proposes the context's last character k times."""

        kind = "unit-echo"
        name = "unit-echo"
        description = "repeats the last character"

        @classmethod
        async def create(cls, choice: str, setup: DraftSetup) -> EchoDrafter:
            drafter = cls()
            drafter.choice = choice
            return drafter

        async def propose(self, context: str, k: int, options: SamplingOptions, width: int = 1) -> Draft:
            return Draft([context[-1]] * k)

    assert registry[before:] == [EchoDrafter]
    assert drafter_class("unit-echo") is EchoDrafter
    assert model_free_drafters()["unit-echo"] == "repeats the last character"
    assert drafter_class("qwen2.5-coder:0.5b") is ModelDrafter  # a named class does not serve model names
    drafter = await build_drafter("unit-echo", setup())  # the choice builds the class's drafter
    assert isinstance(drafter, EchoDrafter)
    draft = await drafter.propose("abc", 3, GREEDY)
    assert draft.pieces == ["c", "c", "c"] and len(draft) == 3
    assert drafter.exact_distribution is False  # unless a drafter says so, no rejection sampling on it
    drafter.update(draft, 2)  # the default learns nothing and must accept the call


def test_a_class_defined_in_an_isolated_registry_does_not_outlive_it() -> None:
    with isolated_registry():
        class PassingDrafter(Drafter):
            kind = "unit-passing"

        assert drafter_class("unit-passing") is PassingDrafter
    assert "unit-passing" not in model_free_drafters()
    assert PassingDrafter not in base._REGISTRY


async def test_none_means_standard_generation() -> None:
    assert await build_drafter(NONE, setup()) is None
    assert await build_drafter("", setup()) is None
    assert NONE not in model_free_drafters()  # not offered as a drafter


def test_a_model_name_with_no_model_drafter_is_refused(registry: list[type[Drafter]]) -> None:
    registry[:] = [cls for cls in registry if cls.kind]
    with pytest.raises(LookupError, match="no drafter serves 'qwen2.5-coder:0.5b'"):
        drafter_class("qwen2.5-coder:0.5b")


def test_the_latest_model_drafter_serves_model_names(registry: list[type[Drafter]]) -> None:
    class OtherModelDrafter(ModelDrafter):
        pass

    assert drafter_class("any:model") is OtherModelDrafter


def test_anchor_arguments_of_a_draft_model(tmp_path) -> None:
    model = tmp_path / "draft.gguf"
    assert ModelDrafter.llama_server_args("auto", None) is None
    assert ModelDrafter.llama_server_args("auto", model) == ["--spec-type", "draft-simple", "-md", str(model)]
    assert ModelDrafter.llama_server_args("4", model)[-2:] == ["--spec-draft-n-max", "4"]
    assert Drafter.llama_server_args("auto", model) is None


def test_a_drafts_length_counts_its_pieces_not_their_characters() -> None:
    assert len(Draft()) == 0
    assert len(Draft(["def", " f", "(x"], [{}, {}, {}])) == 3


@pytest.mark.parametrize(("text", "graded"), [
    ("def f(x):", (3, 3)),  # all three pieces written
    ("def g(x):", (1, 2)),  # " f" contradicted: one accepted, the second decided against
    ("def", (1, 1)),  # the target has not reached the second piece: undecided
    ("de", (0, 0)),  # nor the first
    ("", (0, 0)),
    ("class A:", (0, 1)),
])
def test_a_draft_held_against_what_the_target_wrote(text: str, graded: tuple[int, int]) -> None:
    assert Draft(["def", " f", "(x"]).graded(text) == graded
