"""A stored answer whose code fence's backticks came partly drafted, partly standard, shown in Chat in a
real browser as its whole text renders (issue 52 item 3): the block closes, no literal ``` shows, and
the prose after it is a paragraph, not code. The answer is put in the data folder before the app starts,
as an earlier answer of the user's would be; tests/unit/test_highlight_splits.py checks every split.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from config import Settings
from tests.support.browser import TARGET, running_app
from tests.support.driving import DRAFT_SPAN, assistant_messages, open_app
from utils.app.store import ConversationStore

# The pieces as the engine stored them: the closing fence's backticks split between draft and standard.
PIECES = [["Here it is:\n\n```python\n", "standard"], ["x = 1\n", "draft"], ["``", "draft"],
          ["`\n\nThe end.", "standard"]]


@pytest.fixture
def split_answer_app(server_url: str, tmp_path_factory) -> Iterator[str]:
    data_dir = tmp_path_factory.mktemp("e2e-split")
    stored = ConversationStore(Settings(data_dir=data_dir).database_path)
    conversation = stored.create("a split fence")
    stored.add_message(conversation, "user", "Set x to 1 in Python.")
    stored.add_message(conversation, "assistant", "".join(text for text, _ in PIECES), pieces=PIECES)
    with running_app(data_dir, OLLAMA_HOST=server_url, SPEC_TARGET_MODEL=TARGET) as app:
        yield app.url


def test_a_fence_split_between_draft_and_standard_closes_and_the_prose_after_it_is_prose(
        page: Page, split_answer_app: str):
    open_app(page, split_answer_app)  # a new tab opens the most recent conversation
    answer = assistant_messages(page).last
    end = answer.get_by_text("The end.")
    expect(end).to_be_visible()
    assert end.evaluate("e => e.closest('pre, code') === null && e.closest('p') !== null"), \
        "the prose after the code block is drawn inside it"
    code = answer.locator("pre code")
    expect(code).to_have_count(1)
    expect(code).to_have_text("x = 1")  # the block holds its code and nothing more
    expect(code.locator(DRAFT_SPAN).first).to_be_visible()  # the drafted line on green, inside the block
    shown = answer.inner_text()
    assert "```" not in shown and "`" not in shown, shown
