"""Accepted draft text highlighted inside rendered Markdown: code blocks coloured, lists, links and
tables intact, while streaming and in the Chat page."""

from __future__ import annotations

import html

from tests.support.app import (
    MARKDOWN_PIECES,
    answer_texts,
    drafted,
    open_app,
    visible,
)
from utils.app.store import ConversationStore


def test_draft_text_is_highlighted_inside_rendered_markdown():
    from utils.app.highlight import DRAFT_SPAN, pieces_html

    shown = pieces_html(MARKDOWN_PIECES)
    assert f"<p>Use <strong>{DRAFT_SPAN}slicing</span></strong>:</p>" in shown
    # The code block is a real <pre><code>, syntax-coloured, with the accepted draft text highlighted
    # inside it (indentation stays plain), and a Copy button in its corner.
    code = shown[shown.index("<code"):shown.index("</code>")]
    assert code.startswith('<code class="language-python">')
    assert visible(code) == "def reverse(s):\n    return s[::-1]\n"
    assert "".join(drafted(code)) == "):return s[::-1]" and "\n    <span" in code
    assert '<span style="color: #008000; font-weight: bold">def</span>' in code  # a keyword, coloured
    assert '<span style="color: #0000FF">reverse</span>' in code  # a function's name
    before_code = shown[:shown.index("<pre")]
    assert before_code.count('class="spec-copy"') == 1 and before_code.endswith("Copy</button>")
    # A list stays a list when its item was drafted, and raw HTML in an answer is text, not markup.
    assert f"<li>{DRAFT_SPAN}short &lt;b&gt;</span></li>" in shown and "<b>" not in shown
    assert shown.count("<span") == shown.count("</span>")


def test_code_in_a_language_pygments_does_not_know_is_plain_and_marks_survive_every_position():
    from utils.app.highlight import pieces_html

    plain = pieces_html([["```klingon\nqapla' ", "standard"], ["batlh", "draft"], ["\n```\n", "standard"]])
    assert "<code class=\"language-klingon\">qapla' " in plain
    assert drafted(plain) == ["batlh"]
    # A draft that starts and ends inside tokens, and one at the very end of the block.
    pieces = [["```python\nprint(", "standard"], ["'hel", "draft"], ["lo')\nx = 4", "standard"], ["2", "draft"],
              ["\n```", "standard"]]
    code = pieces_html(pieces)
    assert visible(code[code.index("<code"):code.index("</code>")]) == "print('hello')\nx = 42\n"
    assert "".join(drafted(code)) == "'hel2" and drafted(code)[-1] == "2"


def test_highlighting_keeps_markdown_intact_while_streaming():
    from utils.app.highlight import DRAFT_SPAN, pieces_html

    # A code block still open while the answer streams is drawn as code, cursor included, no Copy yet.
    streaming = pieces_html([["```python\nx = ", "standard"], ["1", "draft"]], cursor=True)
    code = streaming[streaming.index("<code"):streaming.index("</code>")]
    assert code.startswith('<code class="language-python">') and visible(code) == "x = 1▌\n"
    assert drafted(code) == ["1"] and "spec-copy" not in streaming
    # A drafted heading or fence keeps its syntax at the start of the line.
    assert "<h2>" in pieces_html([["Intro\n\n", "standard"], ["## Steps", "draft"]])
    # A link's address is never changed by the highlight, even when the draft starts inside it.
    linked = pieces_html([["see [docs](https://exam", "standard"], ["ple.org) now", "draft"]])
    assert 'href="https://example.org"' in linked and f"{DRAFT_SPAN} now</span>" in linked
    # A drafted table row: each cell highlighted, no span left between the cells.
    table = pieces_html([["| a | b |\n|---|---|\n| ", "standard"], ["1 | 2", "draft"], [" |", "standard"]])
    assert f"{DRAFT_SPAN}1</span></td>" in table and "</td><span" not in table and table.count("<span") == 2


def test_chat_shows_a_highlighted_code_block_and_copy_buttons(data_dir):
    stored = ConversationStore(data_dir / "conversations.sqlite3")
    conversation = stored.create("code")
    stored.add_message(conversation, "user", "Reverse a string in Python.")
    text = "".join(piece for piece, _ in MARKDOWN_PIECES)
    stored.add_message(conversation, "assistant", text, pieces=MARKDOWN_PIECES)

    at = open_app()
    [shown] = answer_texts(at)
    assert '<pre style="' in shown and '<code class="language-python">' in shown
    assert "return" in drafted(shown)
    # Under the answer: a button holding the answer's Markdown as the model wrote it.
    copy_answer = f'data-copy-text="{html.escape(text, quote=True)}"'
    assert copy_answer in shown
    [question] = [m for m in at.chat_message if m.name == "user"]  # a question has no such button
    assert not question.get("html") and [m.value for m in question.markdown] == ["Reverse a string in Python."]
    at.sidebar.toggle(key="highlight").set_value(False).run()  # off: Streamlit's own Markdown of the same text
    [message] = [m for m in at.chat_message if m.name == "assistant"]
    assert [m.value for m in message.markdown] == [text.strip()]
    assert [copy_answer in h.value for h in message.get("html")] == [True]
