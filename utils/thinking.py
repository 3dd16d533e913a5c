"""A thinking model's answer split into `thinking` and content exactly as Ollama 0.32.15 splits it, and
which tags it splits by. Below the engine and the servers: the standard library only.

    tags = ollama_tags(template)                # ("<think>", "</think>") for a Go template using .Thinking
    parser = ThinkingParser(*tags, prompt=prompt)
    for piece in answer_pieces:                 # one per token, as the runner streams them
        thinking, content = parser.add(piece)   # what is final so far; a possible tag is held back

Which answers Ollama splits (server/routes.go ChatHandler and GenerateHandler): a model with the
`thinking` capability thinks unless asked `think: false`; its text then goes through thinking.Parser
with the tags `thinking.InferTags` finds in the model's Go template, if it finds both; a prompt that
already ends with the opening tag starts the parser inside it. A model with a built-in parser (a
`PARSER` line, or gpt-oss's harmony) is split by that parser instead, which is not ported here. A GGUF
created with only its own Jinja template has no Go template to infer tags from: Ollama returns its
reasoning and closing tag inside the content (recordings 37-49), while the embedded server splits such
a template at `<think>` (`embedded_tags`), the one form a Jinja template with a thinking switch writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

OPENING, CLOSING = "<think>", "</think>"

__all__ = ["CLOSING", "OPENING", "ThinkingParser", "embedded_tags", "ollama_tags", "template_thinks"]


def template_thinks(template: str | None) -> bool:
    """Whether a Jinja chat template has a thinking switch or thinking tags: the embedded server's
    `thinking` capability."""
    return template is not None and ("enable_thinking" in template or OPENING in template)


def embedded_tags(template: str | None) -> tuple[str, str] | None:
    """The tags the embedded server splits a model's thinking by: `<think>` for a template that thinks."""
    return (OPENING, CLOSING) if template_thinks(template) else None


class ThinkingParser:
    """Ollama's thinking.Parser: feed the answer's text piece by piece; each `add` returns the
    (thinking, content) that is final so far and holds back what may still be a tag. Whitespace
    before the opening tag, right after it and right after the closing tag is dropped; an answer
    that does not begin with the opening tag is all content, its leading whitespace kept. As in
    Ollama, text still held back when the answer ends (a partial tag, whitespace only) is dropped.
    `prompt`: a prompt that already ends with the opening tag starts the parser inside it."""

    LOOKING, STARTED, THINKING, CLOSED, DONE = range(5)

    def __init__(self, opening: str = OPENING, closing: str = CLOSING, prompt: str = ""):
        self.opening, self.closing = opening, closing
        self.state = self.LOOKING
        self.held = ""
        if prompt.strip().endswith(opening):
            self.add(opening)

    @property
    def thinking(self) -> bool:
        """Whether the text so far may still be thinking (the closing tag not yet seen)."""
        return self.state in (self.LOOKING, self.STARTED, self.THINKING)

    def add(self, text: str) -> tuple[str, str]:
        self.held += text
        thinking, content = [], []
        going = True
        while going:  # several states may pass in one piece; the caller never waits for what is clear
            more_thinking, more_content, going = self._eat()
            thinking.append(more_thinking)
            content.append(more_content)
        return "".join(thinking), "".join(content)

    def _eat(self) -> tuple[str, str, bool]:
        """One step: (thinking, content, whether to step again)."""
        held = self.held
        if self.state == self.LOOKING:
            trimmed = held.lstrip()
            if trimmed.startswith(self.opening):
                self.held = trimmed[len(self.opening):].lstrip()
                self.state = self.THINKING if self.held else self.STARTED
                return "", "", True
            if self.opening.startswith(trimmed):  # whitespace, or the start of the tag: wait for more
                return "", "", False
            self.state, self.held = self.DONE, ""
            return "", held, False  # no thinking: the text as it came, whitespace and all
        if self.state == self.STARTED:
            self.held = held.lstrip()
            if not self.held:
                return "", "", False
            self.state = self.THINKING
            return "", "", True
        if self.state == self.THINKING:
            if self.closing in held:
                thinking, _, rest = held.partition(self.closing)
                rest = rest.lstrip()
                self.state, self.held = (self.DONE if rest else self.CLOSED), ""
                return thinking, rest, False
            keep = _overlap(held, self.closing)
            self.held = held[len(held) - keep:]
            return held[: len(held) - keep], "", False
        self.held = ""
        if self.state == self.CLOSED:
            held = held.lstrip()
            if held:
                self.state = self.DONE
        return "", held, False


def _overlap(text: str, tag: str) -> int:
    """The length of the longest end of `text` that begins `tag`."""
    for size in range(min(len(tag), len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


# -- thinking.InferTags, over a Go template ---------------------------------------------------------------

@lru_cache(maxsize=64)
def ollama_tags(template: str) -> tuple[str, str] | None:
    """The (opening, closing) tags Ollama splits a model's thinking by (thinking/template.go InferTags),
    or None where it does not split: no `.Thinking` inside a `range` over `.Messages`, a tag missing, a
    template Go cannot parse, or a Jinja template (a GGUF's own, which Ollama does not read for tags).

    InferTags walks the template's parse tree; at each `.Thinking` field inside a `range` whose pipeline
    names `.Messages`, it takes the nearest enclosing list of nodes and trims its first and last text
    nodes: "<think>\\n{{ .Thinking }}\\n</think>" gives ("<think>", "</think>"). The last such field wins."""
    if "{%" in template or "{#" in template:  # Jinja (utils/tool_templates.looks_jinja's test, less strict)
        return None
    try:
        root = _parse(template)
    except ValueError:
        return None
    found: list[tuple[str | None, str | None]] = []
    _visit(root, [], found)
    opening = closing = ""
    for first, last in found:  # a list that does not begin (end) with text leaves the tag found before
        opening, closing = first if first is not None else opening, last if last is not None else closing
    return (opening, closing) if opening and closing else None


@dataclass
class _Text:
    text: str


@dataclass
class _Action:
    fields: list[str]  # the first identifier of each field (`.Thinking.X` -> "Thinking") in its pipeline


@dataclass
class _Branch:
    """An if, range or with: its pipeline's fields, its list and its else list."""

    kind: str
    fields: list[str]
    body: list[object] = field(default_factory=list)
    otherwise: list[object] | None = None


# A field is a dot and a name that starts a term: not a variable's (`$.X`, `$m.X`) nor a chain's (`(...).X`).
_FIELD = re.compile(r"(?:^|(?<=[\s(|,=]))\.([A-Za-z_]\w*)")
_STRING = re.compile(r'"(?:\\.|[^"\\])*"|`[^`]*`|\'(?:\\.|[^\'\\])*\'')
_SPACE = " \t\r\n"


def _fields(pipeline: str) -> list[str]:
    return _FIELD.findall(_STRING.sub('""', pipeline))


def _tokens(template: str) -> list[tuple[str, str]]:
    """("text", text) and ("action", inside) items, trim markers applied as Go's lexer applies them: an
    empty text is no item, and a comment is no item at all."""
    items: list[tuple[str, str]] = []
    at, trim_next = 0, False
    while True:
        start = template.find("{{", at)
        text = template[at:] if start < 0 else template[at:start]
        if trim_next:
            text = text.lstrip(_SPACE)
        if start >= 0 and template[start + 2:start + 3] == "-" and template[start + 3:start + 4] in tuple(_SPACE):
            text = text.rstrip(_SPACE)
        if text:
            items.append(("text", text))
        if start < 0:
            return items
        end = _action_end(template, start + 2)
        inside = template[start + 2:end]
        trim_next = inside.endswith("-") and inside[-2:-1] in tuple(_SPACE)
        inside = inside[1:] if inside.startswith("-") and inside[1:2] in tuple(_SPACE) else inside
        inside = (inside[:-1] if trim_next else inside).strip()
        if not (inside.startswith("/*") and inside.endswith("*/")):
            items.append(("action", inside))
        at = end + 2


def _action_end(template: str, at: int) -> int:
    """Where the action opened before `at` closes (its "}}"), strings skipped."""
    quote = None
    while at < len(template):
        char = template[at]
        if quote:
            if char == "\\" and quote != "`":
                at += 1
            elif char == quote:
                quote = None
        elif char in "\"'`":
            quote = char
        elif template.startswith("}}", at):
            return at
        elif template.startswith("/*", at):  # a comment: "}}" inside it does not close the action
            close = template.find("*/", at + 2)
            if close < 0:
                raise ValueError("unclosed comment")
            at = close + 1
        at += 1
    raise ValueError("unclosed action")


def _parse(template: str) -> list[object]:
    """The template's root list (a `define`'s or `block`'s body is a tree of its own, not the root's)."""
    root: list[object] = []
    # Open lists: (the list being filled, the branch it belongs to or None, whether `end` closes it
    # together with the branch below it: an `else if` chain ends at one `end`).
    stack: list[tuple[list[object], _Branch | None, bool]] = [(root, None, False)]
    for kind, value in _tokens(template):
        current = stack[-1][0]
        if kind == "text":
            current.append(_Text(value))
            continue
        word, _, rest = value.partition(" ")
        if word in ("if", "range", "with"):
            branch = _Branch(word, _fields(rest))
            current.append(branch)
            stack.append((branch.body, branch, False))
        elif word in ("define", "block"):
            if word == "block":
                current.append(_Action(_fields(rest)))
            stack.append(([], None, False))
        elif word == "else":
            _, parent, _ = stack.pop()
            if parent is None:
                raise ValueError("else outside a branch")
            branch = parent
            branch.otherwise = []
            chained_word, _, chained_rest = rest.strip().partition(" ")
            if chained_word in ("if", "with"):  # {{else if x}}: an else list holding one more branch
                chained = _Branch(chained_word, _fields(chained_rest))
                branch.otherwise.append(chained)
                stack.append(([], branch, True))  # a marker closed by the same `end`
                stack.append((chained.body, chained, False))
            else:
                stack.append((branch.otherwise, branch, False))
        elif word == "end":
            if len(stack) == 1:
                raise ValueError("unexpected end")
            stack.pop()
            while len(stack) > 1 and stack[-1][2]:
                stack.pop()
        else:
            current.append(_Action(_fields(value)))
    if len(stack) != 1:
        raise ValueError("unclosed branch")
    return root


def _visit(nodes: list[object], ancestors: list[object], found: list[tuple[str | None, str | None]]) -> None:
    """InferTags' walk: `ancestors` are the enclosing branches and lists, nearest last."""
    path = [*ancestors, nodes]
    for node in nodes:
        if isinstance(node, _Action):
            _fields_at(node.fields, path, found)
        elif isinstance(node, _Branch):
            _fields_at(node.fields, [*path, node], found)
            _visit(node.body, [*path, node], found)
            if node.otherwise is not None:
                _visit(node.otherwise, [*path, node], found)


def _fields_at(fields: list[str], path: list[object], found: list[tuple[str | None, str | None]]) -> None:
    for name in fields:
        if name != "Thinking":
            continue
        ranges = [each for each in path if isinstance(each, _Branch) and each.kind == "range"]
        if not ranges or "Messages" not in ranges[-1].fields:
            continue
        nearest = next(each for each in reversed(path) if isinstance(each, list))
        first, last = nearest[0], nearest[-1]
        found.append((first.text.strip() if isinstance(first, _Text) else None,
                      last.text.strip() if isinstance(last, _Text) else None))
