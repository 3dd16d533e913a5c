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
from functools import lru_cache

from utils.chat_templates import GoNode, parse_go

OPENING, CLOSING = "<think>", "</think>"

__all__ = ["CLOSING", "OPENING", "ThinkingParser", "embedded_tags", "ollama_tags", "server_tags", "template_thinks"]


def template_thinks(template: str | None) -> bool:
    """Whether a Jinja chat template has a thinking switch or thinking tags: the embedded server's
    `thinking` capability."""
    return template is not None and ("enable_thinking" in template or OPENING in template)


def embedded_tags(template: str | None) -> tuple[str, str] | None:
    """The tags the embedded server splits a model's thinking by: `<think>` for a template that thinks."""
    return (OPENING, CLOSING) if template_thinks(template) else None


def server_tags(template: str, embedded: bool) -> tuple[str, str] | None:
    """The tags a server splits a thinking model's answers by, from the template its /api/show gives:
    the embedded server's rule, or Ollama's (`ollama_tags`); None where it leaves them unsplit."""
    return embedded_tags(template) if embedded else ollama_tags(template)


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
    if "{%" in template or "{#" in template:  # Jinja (utils/chat_templates.looks_jinja's test, less strict)
        return None
    try:
        root = parse_go(template)
    except ValueError:
        return None
    found: list[tuple[str | None, str | None]] = []
    _visit(root, [], found)
    opening = closing = ""
    for first, last in found:  # a list that does not begin (end) with text leaves the tag found before
        opening, closing = first if first is not None else opening, last if last is not None else closing
    return (opening, closing) if opening and closing else None


# A field is a dot and a name that starts a term: not a variable's (`$.X`, `$m.X`) nor a chain's (`(...).X`).
_FIELD = re.compile(r"(?:^|(?<=[\s(|,=]))\.([A-Za-z_]\w*)")
_STRING = re.compile(r'"(?:\\.|[^"\\])*"|`[^`]*`|\'(?:\\.|[^\'\\])*\'')


def _fields(pipeline: str) -> list[str]:
    """The first name of each field in an action's or a block's pipeline (`.Thinking.X` -> "Thinking")."""
    return _FIELD.findall(_STRING.sub('""', pipeline))


def _visit(nodes: list[GoNode], ancestors: list[object], found: list[tuple[str | None, str | None]]) -> None:
    """InferTags' walk: `ancestors` are the enclosing blocks and lists of nodes, nearest last."""
    path = [*ancestors, nodes]
    for node in nodes:
        if node.kind == "action":
            _fields_at(_fields(node.text), path, found)
        elif node.kind in ("if", "range", "with"):
            _fields_at(_fields(node.text), [*path, node], found)
            _visit(node.body, [*path, node], found)
            if node.orelse is not None:
                _visit(node.orelse, [*path, node], found)


def _fields_at(fields: list[str], path: list[object], found: list[tuple[str | None, str | None]]) -> None:
    """At a `.Thinking` inside a `range` over `.Messages`: the nearest list's first and last texts, trimmed
    (None where the list does not begin or end with text)."""
    for name in fields:
        if name != "Thinking":
            continue
        ranges = [each for each in path if isinstance(each, GoNode) and each.kind == "range"]
        if not ranges or "Messages" not in _fields(ranges[-1].text):
            continue
        nearest = next(each for each in reversed(path) if isinstance(each, list))
        first, last = nearest[0], nearest[-1]
        found.append((first.text.strip() if first.kind == "text" else None,
                      last.text.strip() if last.kind == "text" else None))
