"""Stop and the live chart count every token shown (issue 52), in Chromium on a fresh data folder with
the default settings (suffix decoding): the chart's caption never says nothing was drafted while green
text is on screen, and Stop reports as many tokens as the partial answer has, counted with the target's
own tokenizer read from the server (/api/show, utils/engine/pieces.py)."""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.support.browser import TARGET, running_app
from tests.support.driving import (
    ANSWER_TIMEOUT,
    LONG_PROMPT,
    RERUN_TIMEOUT,
    SCRIPT_STATE,
    assistant_messages,
    open_app,
    send,
    set_number,
    set_switch,
    start_answer,
)
from utils.app.store import ConversationStore
from utils.engine.client import OllamaClient
from utils.engine.tokenizers import vocabulary

# A function, then a follow-up whose answer copies it (as tests/e2e/test_true_figures.py asks).
FIB = "Write a Python function that returns the n-th Fibonacci number."
RENAME = "Rename the function to fib and show the whole function again."

# Reads what the app's server sends, in order (one Streamlit ForwardMsg per websocket frame): each live
# chart's caption, and each partial answer drawn with accepted draft text (green) and the typing cursor,
# with the caption of the last chart sent before it. The browser draws them in that order.
WATCH_CAPTIONS = """
window.__captions = {last: null, atGreen: []};
const Watched = window.WebSocket;
window.WebSocket = class extends Watched {
  constructor(...args) {
    super(...args);
    this.addEventListener('message', (event) => {
      if (!(event.data instanceof ArrayBuffer)) return;
      const text = new TextDecoder().decode(new Uint8Array(event.data));
      const caption = text.match(/no speed-up yet: [^"\\\\]*|speed-up so far [^"\\\\]*|speed-up: no baseline[^"\\\\]*/);
      if (caption) window.__captions.last = caption[0];
      else if (text.includes('rgba(46, 160, 67, 0.28)') && text.includes('\\u258c'))
        window.__captions.atGreen.push(window.__captions.last);
    });
  }
};
"""


def tokens_of(server_url: str, text: str) -> int:
    """How many tokens the target's tokenizer cuts `text` into, as the server describes its tokenizer."""
    async def count() -> int:
        client = OllamaClient(server_url)
        try:
            return len((await vocabulary(client, TARGET))[1].cut(text))
        finally:
            await client.aclose()
    with ThreadPoolExecutor(1) as thread:  # Playwright's sync API keeps an event loop on this one
        return thread.submit(asyncio.run, count()).result()


def test_the_live_caption_counts_the_green_on_screen_and_stop_its_tokens(page: Page, server_url: str, tmp_path_factory):
    page.context.add_init_script(WATCH_CAPTIONS)
    with running_app(tmp_path_factory.mktemp("e2e-stop"), OLLAMA_HOST=server_url, SPEC_TARGET_MODEL=TARGET) as app:
        open_app(page, app.url)
        set_number(page, "Max tokens", 160)  # speculation on, suffix decoding: the defaults
        send(page, FIB)
        set_number(page, "Max tokens", 400)
        # The follow-up says a few words of its own, then copies the function: on green, drafted by
        # suffix decoding from the first answer. Stop once green text has gone out.
        page.evaluate("window.__captions = {last: null, atGreen: []}")  # this answer's only
        stop = start_answer(page, RENAME)
        page.wait_for_function("window.__captions.atGreen.length > 0", timeout=ANSWER_TIMEOUT)
        stop.click()
        assert_stop_counts_what_it_showed(page, app.data_dir, server_url)
        captions = page.evaluate("window.__captions.atGreen")
    # Every partial answer with green on it went out after a caption that counted drafted tokens.
    assert [c for c in captions if c and re.search(r"drafted 0 of", c)] == [], captions


def test_a_standard_answer_stopped_mid_answer_counts_its_tokens(page: Page, server_url: str, tmp_path_factory):
    """A standard answer is one segment: its statistics come only at its end, and Stop said "Stopped
    early", with no figures, for a page of text."""
    with running_app(tmp_path_factory.mktemp("e2e-stop"), OLLAMA_HOST=server_url, SPEC_TARGET_MODEL=TARGET) as app:
        open_app(page, app.url)
        set_number(page, "Max tokens", 400)
        set_switch(page, "Speculative decoding", False)
        stop = start_answer(page, LONG_PROMPT)
        page.wait_for_function("window.__stream.partials >= 5", timeout=ANSWER_TIMEOUT)
        stop.click()
        assert_stop_counts_what_it_showed(page, app.data_dir, server_url)


def assert_stop_counts_what_it_showed(page: Page, data_dir: Path, server_url: str) -> None:
    """After Stop: the note, the stored figures and the stats line count the tokens of the kept text."""
    stopped = assistant_messages(page).last
    expect(stopped).to_contain_text(re.compile(r"Stopped after \d+ tokens: the partial answer is kept\."),
                                    timeout=RERUN_TIMEOUT)
    page.wait_for_function(f"{SCRIPT_STATE} === 'notRunning'", timeout=RERUN_TIMEOUT)
    store = ConversationStore(data_dir / "conversations.sqlite3")
    [conversation] = store.conversations()
    answer = store.messages(conversation["id"])[-1]
    said = int(re.search(r"Stopped after (\d+) tokens", stopped.inner_text()).group(1))
    shown = tokens_of(server_url, answer["content"])
    assert said == answer["stats"].output_tokens == shown, (said, shown, answer["content"][-80:])
    expect(stopped).to_contain_text(f"{said} tokens, ")  # the stats line counts the same tokens
