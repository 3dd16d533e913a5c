"""Every split of an answer renders as the whole text renders (issue 52): the highlighted HTML of an
answer cut into draft/standard/bonus pieces anywhere has the same blocks and inline elements (code
blocks and their languages, lists, headings, inline code, tables, links) and the same text as the plain
CommonMark of the joined text; only the highlight is added. Split at every character of the shorter
answers and at seeded random places in all of them."""

from __future__ import annotations

import random
import re
from html.parser import HTMLParser

import pytest
from markdown_it import MarkdownIt

from utils.app.highlight import DRAFT_SPAN, pieces_html

# The Markdown the app promises (CommonMark, tables, strikethrough, raw HTML shown as text), rendered
# here independently of utils/app/highlight.py.
PLAIN = MarkdownIt("commonmark", {"html": False}).enable("table").enable("strikethrough")

FENCE_THEN_PROSE = "```python\nx = 1\n```\n\nThe end."
ANSWERS = {
    "fence then prose": FENCE_THEN_PROSE,
    "inline code": "Call `len(s)` or ``a ` b`` on it, not `s.size`.",
    "heading and list": "## Steps\n\n1. Open *the* file\n2. Edit it\n   - keep `x`\n   - drop **y**\n\nDone.",
    "table": "| name | size |\n|:-----|-----:|\n| `a` | 1 |\n| b\\|c | 22 |\n\nAfter the table.",
    "thinking tags as text": "<think>\nThe user wants a sum.\n</think>\n\nThe sum is **3**.",
    "code answer": (
        "Here is a function that reverses a string in Python:\n\n"
        "```python\ndef reverse(s: str) -> str:\n    \"\"\"Return s backwards.\"\"\"\n    return s[::-1]\n```\n\n"
        "Use it like this:\n\n```\n>>> reverse(\"abc\")\n'cba'\n```\n\n"
        "### How it works\n\n- `s[::-1]` is a *slice* with step `-1`:\n  1. start at the end\n  2. walk back\n"
        "- It works on any ~~list~~ sequence.\n\n> Strings are immutable, so a **new** string is returned.\n\n"
        "See [the docs](https://docs.python.org/3/library/stdtypes.html#str) & `help(str)`."
    ),
    "comparison table and tilde fence": (
        "# Sorting\n\nTwo ways:\n\n| way | stable | note |\n|---|---|---|\n| `sorted()` | yes | new list |\n"
        "| `list.sort()` | yes | *in place* |\n\n~~~js\nconst a = [3, 1, 2].sort((x, y) => x - y);\n~~~\n\n"
        "***\n\nNested:\n\n* one\n    * two\n        * three\n\n    back in one\n\nLast line with `code` at the end `x`"
    ),
    "indented code and emphasis": (
        "Setup:\n\n    pip install numpy\n    python -c 'import numpy'\n\n"
        "Then _emphasis_, __strong__, and ***both***; a line break  \nhere, a \\*literal\\* star, 5 * 3 = 15.\n\n"
        "Setext title\n------------\n\n1) first\n2) second"
    ),
}
SHORT = 120  # answers at most this long are split at every character


def splits(text: str, seed: int) -> list[list[list[str]]]:
    """Ways to cut `text` into pieces: at every character (two pieces, either kind first) for the short
    answers, and at random places (1 to 12 cuts, any mix of kinds) for all."""
    cases = []
    if len(text) <= SHORT:
        for cut in range(1, len(text)):
            cases.append([[text[:cut], "draft"], [text[cut:], "standard"]])
            cases.append([[text[:cut], "bonus"], [text[cut:], "draft"]])
    rng = random.Random(seed)
    for _ in range(60):
        cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, min(12, len(text) - 1))))
        bounds = [0, *cuts, len(text)]
        cases.append([[text[a:b], rng.choice(["draft", "draft", "standard", "bonus", "correction"])]
                      for a, b in zip(bounds, bounds[1:])])
    return cases


class Tree(HTMLParser):
    """An HTML fragment as a tree of (tag, attributes that change meaning, children) and text, with what
    only the highlight adds left out: the draft spans, Pygments' colour spans, the Copy buttons and the
    layout divs and styles around them (their content kept)."""

    KEPT = {"class", "href", "src", "alt", "colspan"}
    UNWRAPPED = {"span", "div"}

    def __init__(self, fragment: str):
        super().__init__(convert_charrefs=True)
        self.root: list = []
        self.stack = [self.root]
        self.ignoring = 0
        self.feed(fragment)
        self.close()

    def handle_starttag(self, tag, attrs):
        if self.ignoring or tag == "button":
            self.ignoring += tag == "button"
            return
        if tag in self.UNWRAPPED or tag in ("br", "hr", "img", "input"):
            if tag not in self.UNWRAPPED:
                self.stack[-1].append((tag, tuple(sorted(a for a in attrs if a[0] in self.KEPT)), []))
            return
        aligned = [("align", m[1]) for name, value in attrs if name == "style"
                   for m in re.finditer(r"text-align: ?(\w+)", value or "")]
        element = (tag, tuple(sorted([a for a in attrs if a[0] in self.KEPT] + aligned)), [])
        self.stack[-1].append(element)
        self.stack.append(element[2])

    def handle_endtag(self, tag):
        if tag == "button":
            self.ignoring -= 1
        elif not self.ignoring and tag not in self.UNWRAPPED and tag not in ("br", "hr", "img", "input"):
            self.stack.pop()

    def handle_data(self, data):
        if self.ignoring:
            return
        children = self.stack[-1]
        if children and isinstance(children[-1], str):
            children[-1] += data
        else:
            children.append(data)


def structure(fragment: str) -> list:
    return Tree(fragment).root


def flat(tree: list) -> str:
    """The text of a structure, as read."""
    return "".join(node if isinstance(node, str) else flat(node[2]) for node in tree)


def green(fragment: str) -> str:
    """The text shown on the draft highlight's green."""
    parts, position = [], fragment.find(DRAFT_SPAN)
    while position >= 0:
        start = position + len(DRAFT_SPAN)
        parts.append(Tree(fragment[start:fragment.index("</span>", start)]).root)
        position = fragment.find(DRAFT_SPAN, start)
    return "".join(text for part in parts for text in part)


def mismatches(text: str, cases: list[list[list[str]]]) -> list[list[list[str]]]:
    want = structure(PLAIN.render(text))
    return [pieces for pieces in cases if structure(pieces_html(pieces)) != want]


@pytest.mark.parametrize("name", list(ANSWERS))
def test_every_split_renders_as_the_whole_text(name):
    text = ANSWERS[name]
    cases = splits(text, seed=len(name))
    assert len(cases) >= 60
    wrong = mismatches(text, cases)
    assert not wrong, f"{len(wrong)} of {len(cases)} splits render differently, e.g. {wrong[0]}"
    # And nothing but drafted text is green: read in order, the green is drawn from the drafted pieces.
    for pieces in cases:
        drafted = iter("".join(piece for piece, origin in pieces if origin == "draft"))
        assert all(character in drafted for character in "".join(green(pieces_html(pieces)).split())), pieces


def test_the_split_fence_closes_and_the_prose_after_it_is_prose():
    pieces = [["```python\n", "standard"], ["x = 1\n", "draft"], ["``", "draft"], ["`\n\nThe end.", "standard"]]
    shown = pieces_html(pieces)
    assert structure(shown) == structure(PLAIN.render(FENCE_THEN_PROSE))
    assert "`" not in flat(structure(shown)) and ("p", (), ["The end."]) in structure(shown)
    code = shown[shown.index("<code"):shown.index("</code>")]
    assert code.startswith('<code class="language-python">') and "The end." not in code
    assert green(code).split() == ["x", "=1"]  # the drafted line, coloured; a space between tokens stays plain


def test_only_drafted_text_is_shown_green():
    # A word drafted whole is green wherever it stands; a standard word never is.
    for name, text in ANSWERS.items():
        for word in ("end", "Steps", "name", "sum", "reverse", "Sorting", "numpy"):
            if word not in text:
                continue
            at = text.index(word)
            shown = pieces_html([[text[:at], "standard"], [word, "draft"], [text[at + len(word):], "bonus"]])
            assert green(shown) == word, (name, word)
