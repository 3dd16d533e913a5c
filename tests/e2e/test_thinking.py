"""A thinking model's answer in a real browser (issue 42 item 3): its reasoning streams live in the
Thinking expander with the accepted draft text on green inside it, as the answer's is, and the answer's
statistics count thinking tokens apart from answer tokens.

The model is the STAND-IN thinking model (tests/support/thinking_model.py: the bundled Qwen 0.5B with a
Qwen3-style template) on an embedded server of its own that speculates in process; its reasoning
begins as its template's example does, so prompt lookup drafts inside the reasoning.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import RunningApp, running_app
from tests.support.driving import (
    DRAFT_SPAN,
    LOOKUP_OPTION,
    assistant_messages,
    choose,
    open_app,
    send,
    set_draft_length,
    set_number,
    sidebar,
)
from tests.support.models import DRAFT
from tests.support.own_server import own_server
from tests.support.thinking_model import register, write_gguf

QUESTION = "What is 7 + 6?"

# Whether accepted draft text showed on green inside the Thinking expander while it was still thinking
# (its title "Thinking…"), i.e. live, before the answer was saved and drawn again.
WATCH_THINKING = """() => {
  window.__greenWhileThinking = false;
  new MutationObserver(() => {
    for (const e of document.querySelectorAll('[data-testid="stExpander"]'))
      if (e.innerText.startsWith('Thinking…') || e.querySelector('summary')?.innerText.includes('Thinking…'))
        if (e.querySelector('""" + DRAFT_SPAN.replace('"', '\\"') + """')) window.__greenWhileThinking = true;
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


@pytest.fixture
def thinking_app(tmp_path_factory) -> Iterator[RunningApp]:
    folder = tmp_path_factory.mktemp("e2e-thinking")
    with own_server(folder, (DRAFT,), speculation=True) as url:
        name = register(url, write_gguf(folder))
        with running_app(tmp_path_factory.mktemp("e2e-thinking-app"), OLLAMA_HOST=url,
                         SPEC_TARGET_MODEL=name) as app:
            yield app


def test_thinking_streams_live_with_green_and_its_tokens_are_counted_apart(page: Page, thinking_app: RunningApp):
    open_app(page, thinking_app.url)
    expect(sidebar(page).get_by_role("switch", name="Think")).to_be_checked()
    choose(page, "Drafter", LOOKUP_OPTION)
    set_draft_length(page, "3")  # drafts from the first token (auto would measure standard speed first)
    set_number(page, "Max tokens", 60)
    page.evaluate(WATCH_THINKING)
    send(page, QUESTION)

    assert page.evaluate("window.__greenWhileThinking"), "no green inside the Thinking expander while it streamed"
    answer = assistant_messages(page).last
    thinking = answer.get_by_test_id("stExpander").filter(has_text="Thinking")
    thinking.get_by_text("Thinking", exact=True).click()
    expect(thinking.locator(DRAFT_SPAN).first).to_be_visible()
    caption = answer.get_by_test_id("stCaptionContainer").first
    expect(caption).to_contain_text(re.compile(r"speculative \(lookup\): \d+ answer tokens \+ \d+ thinking tokens"))
