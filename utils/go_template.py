"""Go's text/template, executed: enough of it for the chat templates of Ollama's library (the
TEMPLATE of a Modelfile), printing values as Go prints them.

The tree is utils/chat_templates.parse_go's (text, actions, if / range / with with their else
branches; trim markers applied). Actions are pipelines of fields (`.Messages`, `$.Tools`, `$x.Name`),
variables (declared with `:=`, set with `=`, scoped to their block), literals, parenthesized
pipelines and the builtin functions Ollama's templates use (and, or, not, eq, ne, lt, le, gt, ge, len,
index, slice, print, plus Ollama's json). `template`, `block`, `break` and `continue` are refused
(GoTemplateError), as is anything else this does not know, rather than rendered otherwise.

Values are Python's: str, bool, int, float, None (Go's nil), list (a slice), dict (a map: its keys in
order when ranged or printed), `Struct` (a Go struct: fields by name, printed `{a b}`) and `Stringer`
(a value whose type has a String method, printed by it). The standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from utils.chat_templates import GoNode, parse_go

Operand = Callable[[Any], Any]  # an operand's value, given dot


class GoTemplateError(ValueError):
    """A template this cannot execute (text/template would refuse it too, or it uses what is not here)."""


class Struct:
    """A Go struct value: its fields in declaration order."""

    def __init__(self, **fields: Any):
        self.fields = fields


class Stringer:
    """A Go value whose type has a String method: fields, ranging and truth are the value's, printing
    is `text`; `json`, where given, is how encoding/json writes it."""

    def __init__(self, value: Any, text: str, json: str | None = None):
        self.value, self.text, self.json = value, text, json


def go_float(value: float) -> str:
    """fmt's %v of a float64 (strconv 'g', shortest): an exponent below 1e-4 and from 1e6."""
    if value != value or value in (float("inf"), float("-inf")):
        return "NaN" if value != value else ("+Inf" if value > 0 else "-Inf")
    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    assert isinstance(exponent, int)
    scientific = len(digits) - 1 + exponent
    if value == 0 or -4 <= scientific < 6:
        return format(Decimal(repr(float(value))).normalize(), "f")
    mantissa = str(digits[0]) + ("." + "".join(map(str, digits[1:])) if len(digits) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'-' if scientific < 0 else '+'}{abs(scientific):02d}"


def go_print(value: Any, top: bool = True) -> str:
    """How text/template prints a value (fmt's %v; a top-level nil is "<no value>")."""
    if isinstance(value, Stringer):
        return value.text
    if value is None:
        return "<no value>" if top else "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, list | tuple):
        return "[" + " ".join(go_print(item, False) for item in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{go_print(k, False)}:{go_print(v, False)}" for k, v in sorted(value.items())) + "]"
    if isinstance(value, Struct):
        return "{" + " ".join(go_print(item, False) for item in value.fields.values()) + "}"
    return str(value)


def truth(value: Any) -> bool:
    """text/template's truth: false, 0, nil and empty strings, slices and maps are false; structs true."""
    if isinstance(value, Stringer):
        return truth(value.value)
    if isinstance(value, Struct):
        return True
    return bool(value)


def _ranged(value: Any) -> list[tuple[Any, Any]]:
    value = value.value if isinstance(value, Stringer) else value
    if value is None:
        return []
    if isinstance(value, dict):
        return sorted(value.items())  # Go ranges a map in key order
    if isinstance(value, list | tuple):
        return list(enumerate(value))
    if isinstance(value, int) and not isinstance(value, bool):
        return [(i, i) for i in range(value)]
    raise GoTemplateError(f"range can't iterate over {go_print(value)}")


def _field(value: Any, name: str) -> Any:
    inner = value.value if isinstance(value, Stringer) else value
    if isinstance(inner, dict):
        return inner.get(name)  # a missing key is the zero value (Ollama's missingkey=zero)
    if isinstance(inner, Struct) and name in inner.fields:
        return inner.fields[name]
    if inner is None:
        raise GoTemplateError(f"nil pointer evaluating .{name}")
    raise GoTemplateError(f"can't evaluate field {name}")


def _length(value: Any) -> int:
    inner = value.value if isinstance(value, Stringer) else value
    if not isinstance(inner, str | list | tuple | dict):
        raise GoTemplateError(f"len of {go_print(inner)}")
    return len(inner.encode() if isinstance(inner, str) else inner)


def _index(value: Any, *keys: Any) -> Any:
    for key in keys:
        value = value.value if isinstance(value, Stringer) else value
        value = value.get(key) if isinstance(value, dict) else value[key]
    return value


def _slice(value: Any, *bounds: int) -> Any:
    inner = value.value if isinstance(value, Stringer) else value
    return inner[slice(*bounds)] if len(bounds) > 1 else inner[bounds[0] if bounds else 0:]


def _compare(test: Callable[[Any, Any], bool]) -> Callable[..., bool]:
    def compare(first: Any, *others: Any) -> bool:
        first = first.value if isinstance(first, Stringer) else first
        return any(test(first, other.value if isinstance(other, Stringer) else other) for other in others)
    return compare


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "not": lambda value: not truth(value),
    "eq": _compare(lambda a, b: a == b),
    "ne": lambda a, b: not _compare(lambda x, y: x == y)(a, b),
    "lt": _compare(lambda a, b: a < b), "le": _compare(lambda a, b: a <= b),
    "gt": _compare(lambda a, b: a > b), "ge": _compare(lambda a, b: a >= b),
    "len": _length, "index": _index, "slice": _slice,
    "print": lambda *values: "".join(go_print(v, False) for v in values),
}
_TOKEN = re.compile(r"""\s*(?:(?P<string>"(?:[^"\\]|\\.)*"|`[^`]*`)|(?P<number>-?\d+(?:\.\d+)?)|"""
                    r"""(?P<declare>:=)|(?P<punct>[()|,=])|(?P<variable>\$\w*(?:\.\w+)*)|(?P<field>(?:\.\w+)+|\.)|"""
                    r"""(?P<word>\w+))""")


def _tokens(text: str) -> list[tuple[str, str]]:
    found, pos = [], 0
    while pos < len(text.rstrip()):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise GoTemplateError(f"unexpected {text[pos:].strip()[:20]!r} in {{{{{text}}}}}")
        kind = match.lastgroup or ""
        found.append((kind, match.group(kind)))
        pos = match.end()
    return found


class _Execution:
    """One execution: the data (`$`), the variables in scope, the output."""

    def __init__(self, data: Any, functions: dict[str, Callable[..., Any]]):
        self.functions = {**FUNCTIONS, **functions}
        self.variables: list[tuple[str, Any]] = [("$", data)]
        self.out: list[str] = []

    def variable(self, name: str) -> Any:
        for known, value in reversed(self.variables):
            if known == name:
                return value
        raise GoTemplateError(f'undefined variable "{name}"')

    def assign(self, name: str, value: Any) -> None:
        for i in range(len(self.variables) - 1, -1, -1):
            if self.variables[i][0] == name:
                self.variables[i] = (name, value)
                return
        raise GoTemplateError(f'undefined variable "{name}"')

    def nodes(self, nodes: list[GoNode], dot: Any) -> None:
        for node in nodes:
            if node.kind == "text":
                self.out.append(node.text)
            elif node.kind == "action":
                value, declared = self.action(node.text, dot)
                if not declared:
                    self.out.append(go_print(value))
            elif node.kind in ("if", "with"):
                self.branch(node, dot)
            elif node.kind == "range":
                self.loop(node, dot)
            else:
                raise GoTemplateError("template, block, break and continue are not supported")

    def scoped(self, nodes: list[GoNode], dot: Any, bound: list[tuple[str, Any]] | None = None) -> None:
        """A block's nodes: the variables declared in it are gone at its end."""
        depth = len(self.variables)
        self.variables.extend(bound or [])
        try:
            self.nodes(nodes, dot)
        finally:
            del self.variables[depth:]

    def branch(self, node: GoNode, dot: Any) -> None:
        depth = len(self.variables)
        value, _ = self.action(node.text, dot)  # `if $x := ...`: $x lives in both branches
        bound = self.variables[depth:]
        del self.variables[depth:]
        if truth(value):
            self.scoped(node.body, value if node.kind == "with" else dot, bound)
        elif node.orelse is not None:
            self.scoped(node.orelse, dot, bound)

    def loop(self, node: GoNode, dot: Any) -> None:
        names, pipe = [], node.text
        if (declared := re.match(r"\s*(\$\w*)\s*(?:,\s*(\$\w*)\s*)?:=", pipe)) is not None:
            names, pipe = [n for n in declared.groups() if n], pipe[declared.end():]
        items = _ranged(self.pipeline(_tokens(pipe), dot))
        for key, item in items:
            bound = list(zip(names, [item] if len(names) == 1 else [key, item]))
            self.scoped(node.body, item, bound)
        if not items and node.orelse is not None:
            self.scoped(node.orelse, dot)

    def action(self, text: str, dot: Any) -> tuple[Any, bool]:
        """An action's value, and whether it declared or set a variable (then nothing is printed)."""
        tokens = _tokens(text)
        if len(tokens) > 2 and tokens[0][0] == "variable" and tokens[1] in (("declare", ":="), ("punct", "=")):
            value = self.pipeline(tokens[2:], dot)
            if tokens[1][1] == ":=":
                self.variables.append((tokens[0][1], value))
            else:
                self.assign(tokens[0][1], value)
            return value, True
        return self.pipeline(tokens, dot), False

    def pipeline(self, tokens: list[tuple[str, str]], dot: Any) -> Any:
        commands: list[list[tuple[str, str]]] = [[]]
        depth = 0
        for token in tokens:
            depth += token == ("punct", "(")
            depth -= token == ("punct", ")")
            if token == ("punct", "|") and depth == 0:
                commands.append([])
            else:
                commands[-1].append(token)
        value, piped = None, False
        for command in commands:
            value = self.command(command, dot, [value] if piped else [])
            piped = True
        return value

    def command(self, tokens: list[tuple[str, str]], dot: Any, piped: list[Any]) -> Any:
        if not tokens:
            raise GoTemplateError("empty command")
        kind, text = tokens[0]
        if kind == "word" and text not in ("true", "false", "nil"):
            if text not in self.functions and text not in ("and", "or"):
                raise GoTemplateError(f'function "{text}" not defined')
            operands = self.operands(tokens[1:])
            if text in ("and", "or"):  # evaluated lazily, the deciding value returned (Go 1.18)
                for operand in operands + [_constant(value) for value in piped]:
                    value = operand(dot)
                    if truth(value) != (text == "and"):
                        return value
                return value
            return self.functions[text](*[operand(dot) for operand in operands], *piped)
        operands = self.operands(tokens)
        if len(operands) != 1 or piped:
            raise GoTemplateError(f"can't give arguments to a non-function in {tokens}")
        return operands[0](dot)

    def operands(self, tokens: list[tuple[str, str]]) -> list[Operand]:
        """Each operand as a function of dot, so that `and` and `or` evaluate only what they need."""
        found: list[Operand] = []
        i = 0
        while i < len(tokens):
            kind, text = tokens[i]
            i += 1
            if (kind, text) == ("punct", "("):
                start, depth = i, 1
                while depth:
                    depth += {("punct", "("): 1, ("punct", ")"): -1}.get(tokens[i], 0)
                    i += 1
                path = tokens[i][1] if i < len(tokens) and tokens[i][0] == "field" and tokens[i][1] != "." else ""
                found.append(self._parenthesized(tokens[start:i - 1], path))
                i += bool(path)
            elif kind == "field":
                found.append(self._field(text))
            elif kind == "variable":
                found.append(self._variable(*text.partition(".")[::2]))
            else:
                found.append(_constant(_literal(kind, text)))
        return found

    def _parenthesized(self, inner: list[tuple[str, str]], path: str) -> Operand:
        return lambda dot: self.walk(self.pipeline(inner, dot), path)

    def _field(self, path: str) -> Operand:
        return lambda dot: self.walk(dot, "" if path == "." else path)

    def _variable(self, name: str, path: str) -> Operand:
        return lambda dot: self.walk(self.variable(name), path)

    @staticmethod
    def walk(value: Any, path: str) -> Any:
        for name in filter(None, path.split(".")):
            value = _field(value, name)
        return value


def _constant(value: Any) -> Operand:
    return lambda dot: value


def _literal(kind: str, text: str) -> Any:
    if kind == "string":
        return text[1:-1] if text.startswith("`") else text[1:-1].encode("latin-1", "backslashreplace").decode(
            "unicode_escape").encode("latin-1").decode("utf-8")
    if kind == "number":
        return float(text) if "." in text else int(text)
    if kind == "word":
        return {"true": True, "false": False, "nil": None}[text]
    raise GoTemplateError(f"unexpected {text!r}")


def execute(template: str, data: Any, functions: dict[str, Callable[..., Any]] | None = None) -> str:
    """The template executed on `data`, as text/template.Execute writes it; GoTemplateError if not."""
    try:
        nodes = parse_go(template)
    except ValueError as error:
        raise GoTemplateError(str(error)) from None
    run = _Execution(data, functions or {})
    run.nodes(nodes, data)
    return "".join(run.out)
