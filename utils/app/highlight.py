"""An answer rendered as Markdown with its accepted draft text highlighted inside it: in paragraphs,
lists, tables, inline code and code blocks alike (a `<pre><code>` with highlighted spans inside, its
syntax coloured by Pygments where the block names a language, and a Copy button once the answer is done).

The draft pieces are wrapped in two private-use characters before the Markdown is rendered, so the
Markdown parser sees (almost) the text itself; afterwards each stretch of text between the markers is
wrapped in a span, closed and reopened at every tag boundary, so the spans always nest properly
whatever the Markdown made of the text around them. Raw HTML in an answer is shown as text.
"""

from __future__ import annotations

import html
import itertools
import re

from markdown_it import MarkdownIt
from pygments.lexers import get_lexer_by_name
from pygments.styles import get_style_by_name
from pygments.token import Whitespace
from pygments.util import ClassNotFound

from utils.app import clipboard

DRAFT_COLOUR = "rgba(46, 160, 67, 0.28)"  # the background of accepted draft tokens in the text
DRAFT_SPAN = f'<span style="background-color: {DRAFT_COLOUR}; border-radius: 2px">'
START, END = "\ue000", "\ue001"  # private-use characters: never in an answer's own text
CURSOR = "▌"
# Long lines wrap: in a narrow column (Compare's halves) a scrolled-off line end was read as cut off.
PRE_STYLE = ("background-color: rgba(128, 128, 128, 0.08); padding: 0.75em 1em; border-radius: 6px; "
             "white-space: pre-wrap; overflow-wrap: anywhere; line-height: 1.45")
CONTAINER_STYLE = "line-height: 1.6"
TABLE_STYLE = "border-collapse: collapse; margin: 0.5em 0"
CELL_STYLE = "border: 1px solid rgba(128, 128, 128, 0.3); padding: 0.25em 0.6em; "

_SYNTAX_STYLE = get_style_by_name("default")  # dark enough on the light theme, as GitHub's


def _coloured(code: str, language: str, _attrs: object = None) -> str:
    """A fenced block's code as HTML with Pygments' colours inline, the draft marks kept where they
    were; "" (markdown-it then escapes it plainly) for a language Pygments does not know."""
    try:
        lexer = get_lexer_by_name(language, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return ""
    clean = code.replace(START, "").replace(END, "")
    marks, offset = [], 0  # (where in the clean text, which mark)
    for match in re.finditer(f"[{START}{END}]", code):
        marks.append((match.start() - offset, match.group()))
        offset += 1
    tokens = list(lexer.get_tokens(clean))
    if "".join(value for _, value in tokens) != clean:  # a lexer that rewrote the text: leave it plain
        return ""
    out, position, next_mark = [], 0, 0
    for kind, value in tokens:
        end, pieces = position + len(value), []
        while next_mark < len(marks) and marks[next_mark][0] < end:  # the marks inside this token
            at, mark = marks[next_mark]
            pieces += [clean[position:at], mark]
            position, next_mark = at, next_mark + 1
        pieces.append(clean[position:end])
        position = end
        text = html.escape("".join(pieces), quote=False)
        style = _SYNTAX_STYLE.style_for_token(kind)
        css = "; ".join(part for part in (style["color"] and f"color: #{style['color']}",
                                          style["bold"] and "font-weight: bold",
                                          style["italic"] and "font-style: italic") if part)
        out.append(f'<span style="{css}">{text}</span>' if css and kind not in Whitespace else text)
    out += [mark for _, mark in marks[next_mark:]]  # marks after the last character
    return "".join(out)


_markdown = MarkdownIt("commonmark", {"html": False, "highlight": _coloured}).enable("table").enable("strikethrough")
_TAG = re.compile(r"(<[^>]*>)")
_PRE = re.compile(r"<pre[ >].*?</pre>", re.DOTALL)
_CELL = re.compile(r'<(th|td)( style="([^"]*)")?>')
# A mark at the start of a line goes after the line's block syntax, which must start the line.
_BLOCK_START = re.compile(f"^({START})([ \t]*(?:(?:[-*+]|\\d+[.)])[ \t]+|#{{1,6}}[ \t]+|>[ \t]?|`{{3,}}|~{{3,}})*)",
                          re.MULTILINE)
_LINK_DESTINATION = re.compile(r"\]\([^)\n]*\)")


def marked_text(pieces: list[list[str]]) -> str:
    """The answer's text with each accepted draft piece between START and END, line by line (a marker
    never spans a line break, so it cannot swallow a block boundary such as a code fence)."""
    parts = []
    for draft, group in itertools.groupby(pieces, key=lambda piece: piece[1] == "draft"):
        text = "".join(text for text, _ in group).replace(START, "").replace(END, "")
        if not draft:
            parts.append(text)
            continue
        parts.append("\n".join(f"{START}{line}{END}" if line.strip() else line for line in text.split("\n")))
    marked = _BLOCK_START.sub(r"\2\1", "".join(parts))  # "- item", "# title", "```": syntax before the mark
    marked = _LINK_DESTINATION.sub(_marks_after, marked)  # a link's address stays as written
    return marked.replace(START + END, "")


def _marks_after(match: re.Match) -> str:
    marks = "".join(re.findall(f"[{START}{END}]", match.group(0)))
    return re.sub(f"[{START}{END}]", "", match.group(0)) + marks


def pieces_html(pieces: list[list[str]], cursor: bool = False) -> str:
    """The answer as rendered Markdown, accepted draft text on a green background; while it streams
    (`cursor`) a typing cursor at its end, once done a Copy button on each code block."""
    text = marked_text(pieces) + (CURSOR if cursor else "")
    rendered = _markdown.render(_close_open_fence(text))
    rendered = rendered.replace("<pre>", f'<pre style="{PRE_STYLE}">')
    rendered = rendered.replace("<table>", f'<table style="{TABLE_STYLE}">')
    rendered = _CELL.sub(lambda m: f'<{m[1]} style="{CELL_STYLE}{m[3] or ""}">', rendered)
    rendered = _spans(rendered)
    if not cursor:
        rendered = _PRE.sub(lambda m: clipboard.code_block(m.group()), rendered)
    return f'<div style="{CONTAINER_STYLE}">{rendered}</div>'


def _close_open_fence(text: str) -> str:
    """While an answer streams, a code block may be open: close it, so the rest is not read as Markdown
    outside the block for a moment and then as code."""
    fences = re.findall(r"^ {0,3}(```|~~~)", text, flags=re.MULTILINE)
    return text + f"\n{fences[-1]}" if len(fences) % 2 else text


def _spans(rendered: str) -> str:
    """Turn the markers into spans: open at START, close at END, and close/reopen around every tag."""
    out: list[str] = []
    inside = False
    for part in _TAG.split(rendered):
        if part.startswith("<"):  # a mark inside an attribute (a link's address): drop it, keep its state
            marks = re.findall(f"[{START}{END}]", part)
            inside = marks[-1] == START if marks else inside
            out.append(re.sub(f"[{START}{END}]", "", part))
            continue
        for chunk in re.split(f"([{START}{END}])", part):
            if chunk == START:
                inside = True
            elif chunk == END:
                inside = False
            elif chunk:
                out.append(f"{DRAFT_SPAN}{chunk}</span>" if inside and chunk.strip() else chunk)
    return "".join(out)

