"""Tool calls in a model's output, as Ollama returns them in `message.tool_calls`.

Models whose chat template offers tools (Qwen 2.5, Hermes-style templates) answer a call as
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. The parser takes the answer's text as it
streams, releases the text outside such blocks as content, and turns each block into a call; text
that could still be the start of a block is held back until it is known, so no part of a call leaks
into the content. A block that is not a valid call is given back as content: nothing is dropped.

Small models often answer a call without the tags, as the bare JSON the template describes, or that
JSON in a code fence (qwen2.5-coder:1.5b does). Ollama would return that as content; here an answer
that is nothing but such JSON, naming one of the request's tools, is read as the call. While an
answer could still be one (it starts with `{` or a fence), its text is held back until it ends.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import TYPE_CHECKING, Any

from utils.api.http import ApiError
from utils.api.schemas import ChatBody

if TYPE_CHECKING:  # not at run time: the parser is used without llama.cpp too
    from utils.embedded.runtime.runner import ModelRunner

OPEN, CLOSE = "<tool_call>", "</tool_call>"
FENCE = "```"
_FENCED = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.S)


def offers_tools(template: str | None) -> bool:
    """Whether a chat template renders `tools` (what Ollama checks to give a model the tools capability)."""
    return template is not None and "tools" in template


def chat_tools(runner: ModelRunner, body: ChatBody) -> list[dict[str, Any]] | None:
    """The request's tools for the template, or Ollama's refusal for a model whose template has none."""
    if not body.tools:
        return None
    if not isinstance(body.tools, list) or not all(isinstance(t, dict) for t in body.tools):
        raise ApiError("invalid request: tools must be a list of objects", 400)
    if not offers_tools(runner.metadata.get("tokenizer.chat_template")):
        raise ApiError(f"registry.ollama.ai/library/{body.model} does not support tools", 400)
    return body.tools


def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
           sort_keys: bool = False) -> str:
    """Chat templates' `tojson` as Hugging Face renders them (what the templates were written for):
    plain JSON, keys in their order, no HTML escaping (Jinja's own filter sorts keys and escapes <>&')."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _partial_open(text: str) -> int:
    """How many characters at the end of `text` could be the start of OPEN."""
    for size in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if OPEN.startswith(text[-size:]):
            return size
    return 0


def _loads(text: str) -> Any:
    """JSON, also as qwen2.5-coder:1.5b's template shows it: its GGUF's template writes the call as
    `{{"name": ..., "arguments": ...}}` (a Go template's escape left in), and the model copies that."""
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        if text.startswith("{{") and text.endswith("}}"):
            return json.loads(text[1:-1])
        raise


def parse_call(text: str, index: int) -> dict[str, Any] | None:
    """One block's JSON as Ollama's tool call, or None when it is not one."""
    try:
        value = _loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return {"id": f"call_{secrets.token_hex(4)}",
            "function": {"index": index, "name": value["name"], "arguments": arguments}}


def bare_calls(text: str, names: set[str], first: int) -> list[dict[str, Any]] | None:
    """The calls in an answer that is only a call's JSON (or a list of them), fenced or not."""
    text = text.strip()
    fenced = _FENCED.match(text)
    try:
        value = _loads(fenced.group(1) if fenced else text)
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(item, dict) and item.get("name") in names for item in items):
        return None
    calls = [call for i, item in enumerate(items) if (call := parse_call(json.dumps(item), first + i)) is not None]
    return calls if len(calls) == len(items) else None


def _could_be_bare(text: str) -> bool:
    """Whether an answer that begins with `text` may still turn out to be a bare call."""
    text = text.lstrip()
    return text.startswith(("{", "[", FENCE)) or FENCE.startswith(text)


def tool_names(tools: list[dict[str, Any]]) -> set[str]:
    return {str((t.get("function") or {}).get("name", "")) for t in tools}


class ToolCallParser:
    """Splits streamed answer text into content and tool calls; `names`: the request's tools."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.pending = ""
        self.inside = False  # after OPEN, before CLOSE
        self.count = 0  # calls found so far
        self.bare = True  # all the answer so far is in `pending` and may be a bare call

    def feed(self, text: str) -> tuple[str, list[dict[str, Any]]]:
        """(content that is final, calls completed) after `text`."""
        self.pending += text
        if self.bare:
            if OPEN not in self.pending and _could_be_bare(self.pending):
                return "", []
            self.bare = False
        content: list[str] = []
        calls: list[dict[str, Any]] = []
        while True:
            if not self.inside:
                at = self.pending.find(OPEN)
                if at < 0:
                    cut = len(self.pending) - _partial_open(self.pending)
                    content.append(self.pending[:cut])
                    self.pending = self.pending[cut:]
                    break
                content.append(self.pending[:at])
                self.pending, self.inside = self.pending[at + len(OPEN):], True
            else:
                at = self.pending.find(CLOSE)
                if at < 0:
                    break
                block, self.pending, self.inside = self.pending[:at], self.pending[at + len(CLOSE):], False
                self._block(block, content, calls, CLOSE)
        return "".join(content), calls

    def flush(self) -> tuple[str, list[dict[str, Any]]]:
        """What is held back once the answer has ended (a block the model did not close is still read)."""
        content: list[str] = []
        calls: list[dict[str, Any]] = []
        if self.bare:
            self.bare = False
            found = bare_calls(self.pending, self.names, self.count)
            if found:
                self.pending, self.count = "", self.count + len(found)
                return "", found
            text, self.pending = self.pending, ""
            return text, []
        if self.inside:
            self._block(self.pending, content, calls, "")
        else:
            content.append(self.pending)
        self.pending, self.inside = "", False
        return "".join(content), calls

    def _block(self, block: str, content: list[str], calls: list[dict[str, Any]], close: str) -> None:
        call = parse_call(block, self.count)
        if call is None:
            content.append(OPEN + block + close)
        else:
            calls.append(call)
            self.count += 1
