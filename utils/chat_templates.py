"""What Ollama reads from a model's chat template: the tool-call tag (utils/tool_calls.py tool_tag),
Ollama's parseTag (tools/template.go) on a Go template, and the same reading of a Jinja template's
tool_calls block; and the tree that thinking.InferTags walks (utils/thinking.py), `parse_go`.

A Go template is parsed only as far as those look: text, actions, and the if / range / with blocks
that nest them (with `else` and `else if`); define and block bodies are not part of the main tree and
are left out, as text/template leaves them. The standard library only.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

# strings.TrimSpace's white space (unicode.IsSpace), which is str.isspace's without \x1c-\x1f.
GO_SPACE = "".join(c for c in map(chr, range(0x3001)) if c.isspace() and c not in "\x1c\x1d\x1e\x1f")
_QUOTES = "\"'`"


def finish_tag(text: str) -> str:
    """parseTag's last steps on the text found: CRLF as LF, cut at its first "{" (a call's JSON may
    follow the tag in the same text), trimmed; "{" when nothing is left."""
    tag = text.replace("\r\n", "\n").partition("{")[0].strip(GO_SPACE)
    return tag or "{"


def _scan_to(template: str, start: int, closing: str) -> int:
    """Where `closing` ends an action or tag opened before `start`, outside quoted strings; -1 if never."""
    i, quote = start, ""
    while i < len(template):
        c = template[i]
        if quote:
            if c == "\\" and quote != "`":
                i += 1
            elif c == quote:
                quote = ""
        elif c in _QUOTES:
            quote = c
        elif template.startswith(closing, i):
            return i
        i += 1
    return -1


# ---- Go templates -------------------------------------------------------------------------------

@dataclass
class GoNode:
    kind: str  # "text", "action", "if", "range", "with", "other" (template, break, continue)
    text: str = ""  # a text node's text, or a block's pipeline
    body: list[GoNode] = field(default_factory=list)
    orelse: list[GoNode] | None = None


def _go_tokens(template: str) -> list[tuple[str, str]]:
    """("text", text) and ("action", its words) in order; trim markers applied, comments dropped."""
    tokens: list[tuple[str, str]] = []
    pos, trim_next = 0, False
    while True:
        at = template.find("{{", pos)
        text = template[pos:] if at < 0 else template[pos:at]
        inner_start = at + 2
        if at >= 0 and re.match(r"-[ \t\r\n]", template[inner_start:inner_start + 2]):  # "{{- ": trim before
            text, inner_start = text.rstrip(" \t\r\n"), inner_start + 2
        if trim_next:
            text = text.lstrip(" \t\r\n")
        if text:
            tokens.append(("text", text))
        if at < 0:
            return tokens
        comment = template.startswith("/*", inner_start)  # its text may hold quotes: not scanned
        after = template.find("*/", inner_start) + 2 if comment else inner_start
        end = _scan_to(template, after, "}}") if after >= inner_start else -1
        if end < 0:
            raise ValueError("unclosed action or comment")
        inner = template[inner_start:end]
        trim_next = inner.endswith("-") and inner[-2:-1] in (" ", "\t", "\r", "\n")
        inner = (inner[:-1] if trim_next else inner).strip()
        if not comment:
            tokens.append(("action", inner))
        pos = end + 2


def _go_list(tokens: list[tuple[str, str]], i: int) -> tuple[list[GoNode], int, str | None]:
    """Nodes from tokens[i] up to an `end` or `else` (returned, consumed) or the end of the tokens."""
    nodes: list[GoNode] = []
    while i < len(tokens):
        kind, text = tokens[i]
        i += 1
        word, rest = (text.split(None, 1) + ["", ""])[:2]
        if kind == "text":
            nodes.append(GoNode("text", text))
        elif word in ("end", "else"):
            return nodes, i, text
        elif word in ("if", "range", "with"):
            node, i = _go_block(word, rest, tokens, i)
            nodes.append(node)
        elif word in ("define", "block"):
            _, i, closing = _go_list(tokens, i)  # a template of its own, outside the main tree
            if closing != "end":
                raise ValueError(f"unclosed {word}")
            if word == "block":
                nodes.append(GoNode("other"))  # where it is invoked: a TemplateNode
        elif word in ("template", "break", "continue"):
            nodes.append(GoNode("other"))
        else:
            nodes.append(GoNode("action", text))
    return nodes, i, None


def _go_block(kind: str, pipe: str, tokens: list[tuple[str, str]], i: int) -> tuple[GoNode, int]:
    """An if / range / with block from after its opening action through its `end`; `else if X`
    becomes an else list holding one if block that shares the end, as text/template parses it."""
    node = GoNode(kind, pipe.strip())
    node.body, i, closing = _go_list(tokens, i)
    if closing is None:
        raise ValueError(f"unclosed {kind}")
    if closing.startswith("else"):
        chained = closing[4:].strip()
        if chained:
            word, rest = (chained.split(None, 1) + [""])[:2]
            inner, i = _go_block(word, rest, tokens, i)
            node.orelse = [inner]
        else:
            node.orelse, i, closing = _go_list(tokens, i)
            if closing != "end":
                raise ValueError(f"expected end after else, found {closing}")
    return node, i


def _mentions_tool_calls(pipe: str) -> bool:
    """isToolCallsNode: a field of the pipeline's commands (not inside parentheses, not after a
    variable such as $.ToolCalls) has ToolCalls among its names."""
    depth, words, word = 0, [], ""
    for c in pipe:
        depth += c == "("
        if depth == 0 and c not in " \t\r\n|":
            word += c
        elif word:
            words.append(word)
            word = ""
        depth -= c == ")"
    words.append(word)
    return any(re.fullmatch(r"(\.\w+)+", w) and "ToolCalls" in w[1:].split(".") for w in words)


def _find_tool_call_node(nodes: list[GoNode]) -> GoNode | None:
    """findToolCallNode: the first if block whose pipeline names .ToolCalls, searched depth first."""
    for node in nodes:
        if node.kind == "if" and _mentions_tool_calls(node.text):
            return node
        if node.kind in ("if", "range", "with"):
            for nested in (node.body, node.orelse or []):
                if (found := _find_tool_call_node(nested)) is not None:
                    return found
    return None


def _find_text_node(nodes: list[GoNode]) -> str | None:
    """findTextNode: the first text that is not blank, depth first; an action ends the search, and so
    does a nested block that has none."""
    for node in nodes:
        if node.kind == "text":
            if node.text.strip(GO_SPACE):
                return node.text
        elif node.kind in ("if", "range", "with"):
            for nested in (node.body, node.orelse or []):
                if (text := _find_text_node(nested)) is not None:
                    return text
            return None
        elif node.kind == "action":
            return None
    return None


def parse_go(template: str) -> list[GoNode]:
    """A Go template's main tree; ValueError for one text/template cannot parse."""
    try:
        tokens = _go_tokens(template)
        nodes, i, closing = _go_list(tokens, 0)
    except RecursionError:
        raise ValueError("nested too deep") from None
    if closing is not None or i != len(tokens):  # an `end` or `else` with no block: not a template
        raise ValueError(f"unexpected {closing}")
    return nodes


def go_tag(template: str) -> str:
    """tools/template.go parseTag on a Go template's text ("{" for one text/template cannot parse)."""
    try:
        nodes = parse_go(template)
    except ValueError:
        return "{"
    block = _find_tool_call_node(nodes)
    text = _find_text_node(block.body) if block is not None else None
    return finish_tag(text) if text is not None else "{"


# ---- Jinja templates ----------------------------------------------------------------------------

def looks_jinja(template: str) -> bool:
    """Whether a chat template is Jinja (a GGUF's tokenizer.chat_template), not a Go template."""
    return "{%" in template


_STRING = re.compile(r"""\s*('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""", re.S)
_NEGATED = re.compile(r"\bnot\s+[\w.\[\]'\"]*tool_calls")


def _jinja_tokens(template: str) -> list[tuple[str, str]]:
    """("text" | "output" | "statement", what is inside) in order; comments dropped."""
    tokens: list[tuple[str, str]] = []
    pos = 0
    while (at := re.compile(r"\{[{%#]").search(template, pos)) is not None:
        if at.start() > pos:
            tokens.append(("text", template[pos:at.start()]))
        opener = at.group()
        closing = {"{{": "}}", "{%": "%}", "{#": "#}"}[opener]
        end = template.find(closing, at.end()) if opener == "{#" else _scan_to(template, at.end(), closing)
        if end < 0:
            return tokens
        inner = template[at.end():end].strip("-+ \t\r\n")
        if opener != "{#":
            tokens.append(("output" if opener == "{{" else "statement", inner))
        pos = end + 2
    tokens.append(("text", template[pos:]))
    return tokens


def jinja_tag(template: str) -> str:
    """parseTag's reading of a Jinja template (Ollama has none: it hands such models to llama-server).
    The block is the first `if`, `elif` or `for` whose expression names tool_calls, not negated
    (`not message.tool_calls` is the branch without calls); its text is the first non-blank literal
    text, or string literal that an output starts with (`{{- '\\n<tool_call>\\n{"name": "' }}`), after
    it. `set`s and nested tags without text are passed over; an output of anything else ends the
    search, as an action ends parseTag's."""
    tokens = _jinja_tokens(template)
    starts = [i for i, (kind, inner) in enumerate(tokens) if kind == "statement"
              and inner.split(" ", 1)[0] in ("if", "elif", "for") and "tool_calls" in inner
              and not _NEGATED.search(inner)]
    if not starts:
        return "{"
    for kind, inner in tokens[starts[0] + 1:]:
        if kind == "text":
            text = inner
        elif kind == "output":
            literal = _STRING.match(inner)
            if literal is None:
                return "{"
            try:
                text = ast.literal_eval(literal.group(1))
            except (ValueError, SyntaxError):
                return "{"
        else:
            continue
        if text.strip(GO_SPACE):
            return finish_tag(text)
    return "{"
