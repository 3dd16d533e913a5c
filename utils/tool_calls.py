"""Tool calls in a model's answer, parsed exactly as Ollama 0.32.15 parses them for a model that has a
Go template and no built-in parser (its generic parser, tools/tools.go and tools/template.go, driven
by server/routes.go ChatHandler). Below the engine and the servers: the standard library only.

    tag = tool_tag(template)                    # "<tool_call>" for Qwen 2.5's; "{" when none is found
    stream = ToolCallStream(tag, request_tools)
    for piece in answer_pieces:                 # one per token, as llama-server streams them
        sent = stream.step(piece)               # (content, calls) to send, or None: nothing is sent
    content, calls = stream.step("", done=True) # what the `done: true` message carries

How Ollama streams a chat with tools (routes.go ChatHandler, the `len(req.Tools) > 0` branch), for
each piece the model produces and then once more for llama-server's final event (text "", done):
`calls, content := toolParser.Add(piece)`; if `content` is not empty, the message carries it and no
calls (calls found in the same piece are dropped); else if there are calls, they go out with an `id`
each (`call_` + 8 of [a-z0-9]) and content ""; else nothing is sent, except a content-less message for
the piece's logprobs when asked, and, at the end, the `done: true` message, whose content is then
`toolParser.Content()` (what a "{" or "[" parser still held; "" for a tag like <tool_call>). A message
that carries thinking is sent anyway. Not streamed (writeChatResponse), the answer is the last message
with the contents of all the messages joined and their tool calls gathered in order. Tool calls never
change `done_reason` ("stop" or "length"); /v1 reports finish_reason "tool_calls" instead of "stop".

Hence qwen2.5-coder:1.5b, whose template's tag is <tool_call>, gets its bare-JSON calls back as content
(recordings 22-28), and text after a tag is never content: Ollama swallows it.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from utils.chat_templates import go_tag, jinja_tag, looks_jinja

__all__ = ["ToolCallParser", "ToolCallStream", "builtin_parser", "builtin_parser_reason", "find_arguments",
           "find_tool", "ollama_answer", "ollama_chunks", "tool_tag"]


@lru_cache(maxsize=64)
def tool_tag(template: str) -> str:
    """The text that starts a tool call in a model's answer (tools/template.go parseTag): the first
    non-blank text inside the template's first `{{ if ... .ToolCalls ... }}`, cut at its first "{",
    or "{" (any JSON object may be a call). A Jinja template (what a GGUF carries, and the embedded
    server's /api/show returns) is read the same way from its tool_calls block (utils/chat_templates.py)."""
    return jinja_tag(template) if looks_jinja(template) else go_tag(template)


def _go_number(text: str) -> int | float:
    """A JSON number as Go's json.Unmarshal into `any` reads it (a float64), written back as Go's
    encoder writes it: 1.0 and 1 both come back as 1, 2**64+1 as 18446744073709551616."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"cannot unmarshal number {text} into float64")
    return int(value) if value.is_integer() and abs(value) < 1e21 else value


def _no_constant(name: str) -> Any:
    raise ValueError(f"invalid character in JSON: {name}")  # Go accepts no NaN or Infinity


def go_json(text: str) -> Any:
    """json.Unmarshal of `text` into `any`, as Go reads it; ValueError where Go fails."""
    return json.loads(text, parse_int=_go_number, parse_float=_go_number, parse_constant=_no_constant)


def _find_map(name: str, obj: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    """findArguments' findMap: obj[name] as an object, or a string holding one ("null" gives None, found)."""
    value = obj.get(name)
    if isinstance(value, dict):
        return value, True
    if isinstance(value, str):
        try:
            parsed = go_json(value)
        except ValueError:
            return None, False
        if parsed is None or isinstance(parsed, dict):
            return parsed, True
    return None, False


def _find_object(obj: dict[str, Any], tool_name: str) -> tuple[dict[str, Any] | None, bool]:
    """findArguments' findObject: the arguments inside a parsed object, searched depth first. (Go walks
    a map in random order; here an object's keys are walked in their order.)"""
    if "name" in obj:
        for key in ("arguments", "parameters"):
            args, found = _find_map(key, obj)
            if found:
                return args, True
        return None, True
    args, found = _find_map(tool_name, obj)
    if found:
        return args, True
    for value in obj.values():
        children = value if isinstance(value, list) else [value]
        for child in (item for item in children if isinstance(item, dict)):
            args, found = _find_object(child, tool_name)
            if found:
                return args, True
    return None, False


def _structural(text: str) -> Iterator[tuple[int, str]]:
    """The characters of `text` outside JSON strings, with their index, as tools.go's scans read them:
    a backslash escapes the next character anywhere, a quote opens or closes a string."""
    in_string = escaped = False
    for i, c in enumerate(text):
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == '"':
            in_string = not in_string
        elif not in_string:
            yield i, c


def find_arguments(tool_name: str, buffer: str) -> tuple[dict[str, Any] | None, int]:
    """tools.go findArguments: the first balanced {...} in `buffer` (quotes and escapes respected)
    that is valid JSON, read for the arguments of `tool_name`, or the whole object when none are
    found in it; with the index of its closing brace. (None, 0) while there is none."""
    start, braces = -1, 0
    for i, c in _structural(buffer):
        if c == "{":
            if braces == 0:
                start = i
            braces += 1
        elif c == "}":
            braces -= 1
            if braces == 0 and start != -1:
                try:
                    data = go_json(buffer[start:i + 1])
                except ValueError:  # not a valid object: keep looking
                    start = -1
                    continue
                args, found = _find_object(data, tool_name)
                return (args if found else data), i
            braces = max(braces, 0)
    return None, 0


def find_tool(names: list[str], buffer: str) -> tuple[str | None, int]:
    """tools.go findTool: the tool named earliest in `buffer` (the longer name where two start at the
    same place), with the end of its name; none while the buffer ends with a proper prefix of a name
    ("get" may still become "get_weather")."""
    if not buffer:
        return None, 0
    if any(0 < k < len(name) and buffer.endswith(name[:k]) for name in names for k in range(1, len(name))):
        return None, 0
    found, start, end = None, -1, -1
    for name in names:
        pos = buffer.find(name)
        if pos == -1 or (start != -1 and (pos > start or (pos == start and len(name) <= len(found or "")))):
            continue
        found, start, end = name, pos, pos + len(name)
    return (found, end) if found is not None else (None, 0)


class ToolCallParser:
    """tools.go Parser: `add` each piece of the answer's content as it comes; `content()` at the end.

    Until the tag is seen, text is content, except an end that could be the start of the tag, held
    until the next piece tells. With "{" or "[" as the tag, an answer whose first non-blank text is
    not the tag is content through to its end. From the tag on, every tool name followed (anywhere
    later) by a complete JSON object is a call, numbered from 0 in `function.index`; the text between
    calls is dropped. With "{" or "[", once the remaining text holds a balanced {...} or [...] that is
    not a call, it and all that follows is content again."""

    def __init__(self, tag: str, tools: list[dict[str, Any]]):
        self.tag = tag
        self.names = [str((tool.get("function") or {}).get("name") or "") for tool in tools if isinstance(tool, dict)]
        self.state = "looking"  # for the tag; then "calling"; then "done": all is content
        self.buffer = ""
        self.n = 0  # calls found

    def add(self, text: str) -> tuple[list[dict[str, Any]], str]:
        """(calls completed, content to send) once `text` is added (Parser.Add)."""
        if self.state == "done":
            return [], text
        self.buffer += text
        content = ""
        if self.state == "looking":
            at, found = self._find_tag()
            content, self.buffer = (self.buffer, "") if at == -1 else (self.buffer[:at], self.buffer[at:])
            if self.tag in ("{", "[") and content.strip():
                self.state = "done"
                content, self.buffer = content + self.buffer, ""
                return [], content
            if not found:
                return [], content
            self.state = "calling"
        calls = []
        while (call := self._parse_call()) is not None:
            calls.append(call)
        if self._closed():
            self.state, content, self.buffer = "done", self.buffer, ""
        return calls, content

    def content(self) -> str:
        """What the parser still holds that Ollama sends at the end (Parser.Content): the held text
        of a "{" or "[" parser that found no call; nothing otherwise."""
        return self.buffer if self.n == 0 and self.tag in ("{", "[") else ""

    def _find_tag(self) -> tuple[int, bool]:
        """findTag: where the tag starts, found; or where a possible start of it begins, not found."""
        if (at := self.buffer.find(self.tag)) > -1:
            return at, True
        for size in range(min(len(self.buffer), len(self.tag)), 0, -1):
            if self.buffer.endswith(self.tag[:size]):
                return len(self.buffer) - size, False
        return -1, False

    def _parse_call(self) -> dict[str, Any] | None:
        """parseToolCall: the next complete call; the buffer is cut at its end, which is the object's
        closing brace itself (Go slices from that index, so the "}" stays and is skipped later)."""
        name, end = find_tool(self.names, self.buffer)
        if name is None:
            return None
        args, at = find_arguments(name, self.buffer)
        if args is None:
            return None
        call = {"function": {"index": self.n, "name": name, "arguments": args}}
        self.n += 1
        self.buffer = self.buffer[max(end, at):]
        return call

    def _closed(self) -> bool:
        """Parser.done: with "{" or "[" as the tag, whether the buffer holds a balanced pair."""
        pair = {"{": "{}", "[": "[]"}.get(self.tag)
        if pair is None:
            return False
        count = 0
        for _, c in _structural(self.buffer):
            if c == pair[0]:
                count += 1
            elif c == pair[1]:
                count -= 1
                if count == 0:
                    return True
        return False


_ID_LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789"


def call_id() -> str:
    """routes.go toolCallId: "call_" and 8 random lower-case letters or digits."""
    return "call_" + "".join(random.choices(_ID_LETTERS, k=8))


class ToolCallStream:
    """routes.go ChatHandler's use of the parser, one piece of the answer at a time (see the module's
    docstring): `step` says what the message for that piece carries, or None where Ollama sends no
    message for it (unless it carries thinking or logprobs: then content "" and no calls)."""

    def __init__(self, tag: str, tools: list[dict[str, Any]]):
        self.parser = ToolCallParser(tag, tools)

    def step(self, text: str, done: bool = False) -> tuple[str, list[dict[str, Any]]] | None:
        calls, content = self.parser.add(text)
        if content:
            return content, []  # calls completed by the same piece are lost, as in routes.go
        if calls:
            return "", [{"id": call_id(), **call} for call in calls]
        if done:
            return self.parser.content(), []
        return None

    def finish(self, text: str = "") -> tuple[str, list[dict[str, Any]]]:
        """The `done: true` message's content and calls; `text`: llama-server's final event's (mostly "")."""
        return self.step(text, done=True) or ("", [])


def ollama_chunks(tag: str, tools: list[dict[str, Any]], pieces: list[str]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The (content, tool_calls) of each message Ollama streams for an answer made of `pieces` (one
    per token), the last being the `done: true` message's."""
    stream = ToolCallStream(tag, tools)
    sent = [out for piece in pieces if (out := stream.step(piece)) is not None]
    return [*sent, stream.finish()]


def ollama_answer(tag: str, tools: list[dict[str, Any]], pieces: list[str]) -> tuple[str, list[dict[str, Any]]]:
    """The non-streamed answer's content and tool_calls (writeChatResponse: the streamed messages joined)."""
    chunks = ollama_chunks(tag, tools, pieces)
    return "".join(content for content, _ in chunks), [call for _, calls in chunks for call in calls]


_MODELFILE_LINE = re.compile(r"^(PARSER)\s+(.+?)\s*$", re.M)


def builtin_parser(show: dict[str, Any]) -> str | None:
    """Why Ollama parses this model's answers (tool calls and thinking) with a built-in parser rather
    than the generic ones ported here (this module, utils/thinking.py), from its /api/show answer; None
    when it does not. /api/show has no parser field of its own (GetModelInfo leaves
    ShowResponse.Parser/Renderer empty), but its `modelfile` writes the model's PARSER line (images.go
    Model.String). Ollama uses a built-in parser (model/parsers: qwen3-coder, harmony, ...) for a
    PARSER, and harmony for gpt-oss templates (routes.go shouldUseHarmony)."""
    lines = dict(_MODELFILE_LINE.findall(str(show.get("modelfile") or "")))
    if parser := lines.get("PARSER", "").strip('"'):
        return f"Ollama parses this model's answers with its built-in parser {parser}"
    template = str(show.get("template") or "")
    family = str((show.get("details") or {}).get("family") or "")
    if family in ("gptoss", "gpt-oss") and "<|start|>" in template and "<|end|>" in template:
        return "Ollama parses this model's answers with its built-in harmony parser (gpt-oss)"
    return None


def builtin_parser_reason(show: dict[str, Any]) -> str | None:
    """Why Ollama would not parse this model's tool calls with the generic parser ported here, from its
    /api/show answer; None when it would: a built-in parser (`builtin_parser`), or a model without a Go
    template (created FROM a GGUF alone, whose `template` is the GGUF's Jinja), whose chat Ollama hands
    to llama-server's /v1/chat/completions, which parses the calls itself (routes.go handleNativeChat).
    Not seen from /api/show: a Go template that Ollama passes over for the GGUF's (images.go
    shouldPreferChatTemplate), and OLLAMA_GO_TEMPLATE on the server."""
    if reason := builtin_parser(show):
        return reason
    if looks_jinja(str(show.get("template") or "")):
        return "the model has no Go template: Ollama lets llama-server render the chat and parse its tool calls"
    return None
