"""Opening and driving the app with Streamlit's AppTest, and answers' stats as the app stores them:
shared by the app's tests (tests/app/; their fixtures are in tests/app/conftest.py)."""

from __future__ import annotations

import html
import re
from pathlib import Path

from streamlit.runtime.pages_manager import PagesManager
from streamlit.testing.v1 import AppTest

from tests.support.models import SMALL
from utils.engine.stats import AnswerStats, RoundRecord

ROOT = Path(__file__).resolve().parents[2]


RUN_TIMEOUT = 240  # seconds for one script run; answers are short but the CPU is shared


MAX_TOKENS = 16


REPEAT_PROMPT = "Repeat this sentence exactly: The quick brown fox jumps over the lazy dog."


class NavigationPagesManager(PagesManager):
    """AppTest forgets before every run that the app uses st.navigation, and because a pages/ folder
    exists it runs every run after the first as an old-style multipage app: the page file alone,
    without app.py and its sidebar. Streamlit's server turns that mode off for good at the first
    st.navigation call; this does the same for AppTest."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        PagesManager.uses_pages_directory = False


def open_app(page: str | None = None) -> AppTest:
    """A new browser session: nothing in st.session_state, everything else from the data folder."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=RUN_TIMEOUT).run()
    assert not at.exception, at.exception
    if page:
        at.switch_page(page).run()
        assert not at.exception, at.exception
    return at


def short_answers(at: AppTest, speculative: bool = True, drafter: str = "lookup", k: int | str = 4) -> None:
    """Sidebar settings for a quick answer. A fixed K makes the first answer speculate at once; the
    adaptive controller would first measure standard speed."""
    at.sidebar.toggle(key="speculative").set_value(speculative).run()
    if speculative:
        at.sidebar.selectbox(key="drafter").set_value(drafter)
        at.sidebar.select_slider(key="draft_length").set_value(k)
    at.sidebar.number_input(key="max_tokens").set_value(MAX_TOKENS)


def answer_texts(at: AppTest) -> list[str]:
    """The visible text of each assistant message (Markdown, or HTML when highlighting)."""
    texts = []
    for message in at.chat_message:
        if message.name == "assistant":
            texts.append("".join([m.value for m in message.markdown] + [h.value for h in message.get("html")]))
    return texts


def conversation_buttons(at: AppTest) -> list[tuple[str, bool]]:
    """The conversations listed in the sidebar, top to bottom, and whether each is the open one."""
    return [(b.label, b.proto.type == "primary") for b in at.sidebar.button
            if b.key and b.key.startswith("conversation-")]


# The stats of a speculative answer as the app stores them, for pages drawn from stored answers.
def speculative_stats(output: int, drafted: int, accepted: int, ks: list[int], tokens_per_second: float = 40.0,
                      drafter: str = "lookup", **fields) -> AnswerStats:
    rounds = [RoundRecord(k=k, drafted=min(k, drafted), accepted=0, emitted=1, seconds=0.1, at_seconds=0.1 * (n + 1))
              for n, k in enumerate(ks)]
    return AnswerStats(**{"mode": "speculative", "target": SMALL, "drafter": drafter, "done_reason": "stop",
                          "output_tokens": output, "drafted_tokens": drafted, "accepted_tokens": accepted,
                          "drafts": 1 if drafted else 0, "acceptance_rate": accepted / drafted if drafted else 0.0,
                          "tokens_per_second": tokens_per_second, "rounds": rounds, **fields})


MARKDOWN_PIECES = [
    ["Use ", "standard"], ["**slicing**", "draft"], [":\n\n```python\ndef reverse(s", "correction"],
    ["):\n    return s[::-1]", "draft"], ["\n```\n\n- fast\n", "bonus"], ["- short <b>", "draft"], ["\n", "standard"],
]


def visible(fragment: str) -> str:
    """What a reader sees of an HTML fragment: its text, tags dropped, entities read."""
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def drafted(fragment: str) -> list[str]:
    """The stretches of text on the draft highlight's green (the innermost spans)."""
    from utils.app.highlight import DRAFT_SPAN

    return [html.unescape(text) for text in re.findall(re.escape(DRAFT_SPAN) + r"([^<]*)</span>", fragment)]
