"""The Chat page's first screen: what the app does in one sentence, and example prompts where
speculation shows at its best, each a button that picks the drafter it needs and asks the question."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from utils.app.conversations import ask
from utils.app.sidebar import use_for_one_answer
from utils.app.store import ConversationStore

INTRO = ("A local model answers here with speculative decoding: a fast drafter guesses the next tokens and the "
         "target model checks all the guesses in one pass, so the answer is the target's own, only sooner; text "
         "on green is draft text the target accepted.")


@dataclass(frozen=True)
class Example:
    label: str
    why: str  # why speculation pays on it, shown as the button's help
    prompt: str
    drafter: str
    target: str | None = None  # None: the target chosen in the sidebar

    def missing(self, models: list[str]) -> list[str]:
        """The models it needs that the server lacks."""
        needed = [self.target] if self.target else []
        needed += [] if self.drafter == "lookup" else [self.drafter]
        return [model for model in needed if model not in models]


EXAMPLES = [
    Example(
        "Edit pasted code",
        "An edit repeats most of the code it was given: prompt lookup (no draft model) drafts those passages "
        "straight from the prompt, many tokens at a time.",
        "Add type hints and a docstring to this function, and return the whole function:\n\n```python\n"
        "def average(values):\n    total = 0\n    count = 0\n    for value in values:\n"
        "        total += value\n        count += 1\n    if count == 0:\n        return 0.0\n"
        "    return total / count\n```",
        drafter="lookup",
    ),
    Example(
        "Complete code with the Qwen pair",
        "Code is predictable: qwen2.5-coder:0.5b guesses what qwen2.5-coder:1.5b would write, and shares its "
        "tokenizer, so most guesses are accepted.",
        "Complete this Python function:\n\n```python\ndef is_prime(n: int) -> bool:\n"
        '    """Whether n is a prime number."""\n```',
        drafter="qwen2.5-coder:0.5b",
        target="qwen2.5-coder:1.5b",
    ),
]


def first_screen(conversations: ConversationStore, models: list[str], enabled: bool) -> None:
    """The example prompts, for a conversation that has no message yet."""
    st.markdown("**Try an example**: it answers with the drafter shown under it (and its target where one is "
                "shown), then your own settings come back.")
    columns = st.columns(len(EXAMPLES))
    for column, example in zip(columns, EXAMPLES, strict=True):
        missing = example.missing(models)
        help_text = example.why + (f" Needs {' and '.join(missing)}: install on the Models page." if missing else "")
        column.button(example.label, key=f"example-{example.label}", width="stretch", help=help_text,
                      disabled=bool(missing) or not enabled, on_click=_use, args=(conversations, example))
        column.caption(f"{example.target or 'your target'} ← {example.drafter}" + (" (not installed)" if missing
                                                                                    else ""))


def _use(conversations: ConversationStore, example: Example) -> None:
    """Pick the example's models in the sidebar for its answer (a callback: before the widgets are
    drawn), then ask; the user's own choice comes back after the answer (utils.app.sidebar)."""
    changes: dict[str, object] = {"speculative": True, "drafter": example.drafter}
    if example.target:
        changes["target"] = example.target
    use_for_one_answer(changes)
    ask(conversations, None, example.prompt)
