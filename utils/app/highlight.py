"""An answer rendered as Markdown with its accepted draft text highlighted inside it: in paragraphs,
lists, tables, inline code and code blocks alike (a `<pre><code>` with highlighted spans inside, its
syntax coloured by Pygments where the block names a language, and a Copy button once the answer is done).

The joined text is rendered as it is, so every split of an answer into pieces renders exactly as the
whole text does: nothing the highlight adds can reach the Markdown parser (marks inside a code fence's
backticks once left the block open). Then each character of the rendered text is traced back to the
character of the answer it shows, in order, and the drafted ones are wrapped in spans, a span per run
and line inside each stretch of text between tags, so the spans always nest properly. Raw HTML in an
answer is shown as text.
"""

from __future__ import annotations

import html
import re

from markdown_it import MarkdownIt
from markdown_it.helpers import parseLinkDestination, parseLinkTitle
from pygments.lexers import get_lexer_by_name
from pygments.styles import get_style_by_name
from pygments.token import Whitespace
from pygments.util import ClassNotFound

from utils.app import clipboard

DRAFT_COLOUR = "rgba(46, 160, 67, 0.28)"  # the background of accepted draft tokens in the text
DRAFT_SPAN = f'<span style="background-color: {DRAFT_COLOUR}; border-radius: 2px">'
CURSOR = "▌"
# Long lines wrap: in a narrow column (Compare's halves) a scrolled-off line end was read as cut off.
PRE_STYLE = ("background-color: rgba(128, 128, 128, 0.08); padding: 0.75em 1em; border-radius: 6px; "
             "white-space: pre-wrap; overflow-wrap: anywhere; line-height: 1.45")
CONTAINER_STYLE = "line-height: 1.6"
TABLE_STYLE = "border-collapse: collapse; margin: 0.5em 0"
CELL_STYLE = "border: 1px solid rgba(128, 128, 128, 0.3); padding: 0.25em 0.6em; "

_SYNTAX_STYLE = get_style_by_name("default")  # dark enough on the light theme, as GitHub's


def _coloured(code: str, language: str, _attrs: object = None) -> str:
    """A fenced block's code as HTML with Pygments' colours inline; "" (markdown-it then escapes it
    plainly) for a language Pygments does not know."""
    try:
        lexer = get_lexer_by_name(language, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return ""
    tokens = list(lexer.get_tokens(code))
    if "".join(value for _, value in tokens) != code:  # a lexer that rewrote the text: leave it plain
        return ""
    out = []
    for kind, value in tokens:
        text = html.escape(value, quote=False)
        style = _SYNTAX_STYLE.style_for_token(kind)
        css = "; ".join(part for part in (style["color"] and f"color: #{style['color']}",
                                          style["bold"] and "font-weight: bold",
                                          style["italic"] and "font-style: italic") if part)
        out.append(f'<span style="{css}">{text}</span>' if css and kind not in Whitespace else text)
    return "".join(out)


_markdown = MarkdownIt("commonmark", {"html": False, "highlight": _coloured}).enable("table").enable("strikethrough")
_TAG = re.compile(r"(<[^>]*>)")
_PRE = re.compile(r"<pre[ >].*?</pre>", re.DOTALL)
_CELL = re.compile(r'<(th|td)( style="([^"]*)")?>')
_CHARACTER = re.compile(r"&(?:#\d+|#x[0-9a-fA-F]+|\w+);|.", re.DOTALL)  # one character of rendered text
# The Markdown that opens an element and shows no text, skipped in the answer when the element opens,
# so that the element's first characters are not traced to its syntax ("1. 1 apple", "```py\npy()").
_CONTAINERS = r"(?:\s|>|[-*+](?=\s)|\d{1,9}[.)](?=\s))*"
_OPENING = {"pre": re.compile(_CONTAINERS + r"(?:`{3,}|~{3,})[^\n]*\n?"),  # a fence's first line
            "li": re.compile(r"[\s>]*(?:[-*+]|\d{1,9}[.)])"),
            "h": re.compile(r"[\s>]*#{1,6}(?=\s|$)"),
            "code": re.compile(r"[^`]*`+")}  # inline code: its opening backticks (what came before is shown)


def pieces_html(pieces: list[list[str]], cursor: bool = False) -> str:
    """The answer as rendered Markdown, accepted draft text on a green background; while it streams
    (`cursor`) a typing cursor at its end, once done a Copy button on each code block."""
    text = "".join(piece for piece, _ in pieces) + (CURSOR if cursor else "")
    drafted = [origin == "draft" for piece, origin in pieces for _ in piece] + [False] * cursor
    rendered = _markdown.render(_close_open_fence(text))
    rendered = _highlighted(rendered, text, drafted)
    rendered = rendered.replace("<pre>", f'<pre style="{PRE_STYLE}">')
    rendered = rendered.replace("<table>", f'<table style="{TABLE_STYLE}">')
    rendered = _CELL.sub(lambda m: f'<{m[1]} style="{CELL_STYLE}{m[3] or ""}">', rendered)
    if not cursor:
        rendered = _PRE.sub(lambda m: clipboard.code_block(m.group()), rendered)
    return f'<div style="{CONTAINER_STYLE}">{rendered}</div>'


def _close_open_fence(text: str) -> str:
    """While an answer streams, a code block may be open: close it, so the rest is not read as Markdown
    outside the block for a moment and then as code."""
    fences = re.findall(r"^ {0,3}(```|~~~)", text, flags=re.MULTILINE)
    return text + f"\n{fences[-1]}" if len(fences) % 2 else text


def _highlighted(rendered: str, text: str, drafted: list[bool]) -> str:
    """The rendered answer with its drafted characters on green. The rendered text is the answer's text
    in order, less its Markdown syntax, so each character is the next one in the answer that reads the
    same; the syntax that opens an element or follows a link's text is stepped over first."""
    out: list[str] = []
    at, in_pre = 0, False  # where in the answer the next rendered character is looked for
    for part in _TAG.split(rendered):
        if part.startswith("<"):
            name = re.match(r"</?(\w+)", part)
            tag = name[1] if name else ""
            in_pre = (in_pre or tag == "pre") and part != "</pre>"
            opening = _OPENING.get("h" if re.fullmatch(r"h[1-6]", tag) else tag)
            closing_or_block_code = part.startswith("</") or (tag == "code" and in_pre)
            if opening and not closing_or_block_code and (match := opening.match(text, at)):
                at = match.end()
            if part == "</a>" or tag == "img":
                at = _after_link(text, at, image=tag == "img")
            out.append(part)
            continue
        runs: list[tuple[bool, list[str]]] = []
        for unit in _CHARACTER.findall(part):
            at, green = _trace(html.unescape(unit), text, at, drafted)
            if runs and runs[-1][0] == green:
                runs[-1][1].append(unit)
            else:
                runs.append((green, [unit]))
        for green, units in runs:  # a span per line of a run: a line break or an indent alone stays plain
            for shown in re.split("(\n)", "".join(units)):
                out.append(f"{DRAFT_SPAN}{shown}</span>" if green and shown.strip() else shown)
    return "".join(out)


def _trace(character: str, text: str, at: int, drafted: list[bool]) -> tuple[int, bool]:
    """Where the answer goes on after a rendered character, and whether it was drafted. White space
    matches only white space right here (a tab may be shown as spaces, a line's indent dropped); a
    character found nowhere ahead (an entity's) takes the colour of its place and moves nothing."""
    if character.isspace():
        if at < len(text) and text[at].isspace():
            return at + 1, drafted[at]
        return at, at < len(text) and drafted[at]
    found = text.find(character, at)
    if found < 0:
        return at, at < len(text) and drafted[at]
    return found + 1, drafted[found]


def _after_link(text: str, at: int, image: bool) -> int:
    """Past a link's destination and title, `](address "title")` or `][label]`, which show no text; for
    an image, past all of it (its description is an attribute, not text)."""
    if image:
        opening = text.find("![", at)
        at = text.find("]", opening) if opening >= 0 else at
    if text.startswith("][", at):
        end = text.find("]", at + 2)
        return end + 1 if end >= 0 else at
    if not text.startswith("](", at):
        return at
    position = at + 2
    while position < len(text) and text[position] in " \t\n":
        position += 1
    destination = parseLinkDestination(text, position, len(text))
    position = destination.pos if destination.ok else position
    while position < len(text) and text[position] in " \t\n":
        position += 1
    title = parseLinkTitle(text, position, len(text))
    position = title.pos if title.ok else position
    while position < len(text) and text[position] in " \t\n":
        position += 1
    return position + 1 if text.startswith(")", position) else at
