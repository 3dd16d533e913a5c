"""Ollama's Anthropic Messages layer (`POST /v1/messages`, what Claude Code and Anthropic-SDK agents
speak), as translations: a Messages request into Ollama's /api/chat body, and Ollama's answer messages
into Anthropic's message object and its server-sent events. Ported field for field from Ollama
v0.32.15's anthropic/anthropic.go (FromMessagesRequest, ToMessagesResponse, StreamConverter) and
middleware/anthropic.go (the checks, the estimated input tokens, the event framing); any server that
answers in Ollama's chat shape speaks Anthropic through it (utils/api/shaped_routes.py, the proxy's
shaped_answer).

Left out, as Ollama's server answers them without a cloud: the built-in `web_search_*` tool is offered
to the model as a plain function (Ollama runs the search on ollama.com; here its call comes back as a
`tool_use` block). Where this layer differs from Ollama's, docs/usage.md and
tests/test_recorded_conformance.py say so.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

from utils.api.http import json_bytes
from utils.api.tool_schema import ollama_parameters, search_parameters
from utils.errors import SpecError

# Ollama's NewError: the status's error type (anthropic.go).
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 429: "rate_limit_error", 503: "overloaded_error", 529: "overloaded_error"}
# What `output_config.effort` asks of a thinking model, where `thinking` says nothing (anthropic.go).
EFFORTS = {"high": "high", "xhigh": "high", "medium": "medium", "low": "low", "max": "max"}


class AnthropicError(SpecError, ValueError):
    """A request Ollama's middleware refuses before its chat handler: 400 in Anthropic's error shape."""

    def __init__(self, message: str):
        super().__init__(message, 400)


def error_body(status: int, message: str) -> dict[str, Any]:
    """Anthropic's error object, as Ollama's NewError makes it (with a request id of its own)."""
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message},
            "request_id": f"req_{secrets.token_hex(12)}"}


# -- the request ------------------------------------------------------------------------------------


def _blocks(content: Any) -> list[dict[str, Any]]:
    """A message's content as blocks: a plain string is one text block (MessageParam.UnmarshalJSON)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(block, dict) for block in content):
        raise AnthropicError("message content must be a string or a list of content blocks")
    return content


def _image(source: Any) -> str:
    """A base64 image source as Ollama's image data (base64 in its JSON); resolveImageSource's errors."""
    if not isinstance(source, dict):
        raise AnthropicError("invalid image source")
    if source.get("type") != "base64":
        raise AnthropicError(f"invalid image source type: {source.get('type', '')}. Only base64 images are supported.")
    try:
        base64.b64decode(source.get("data") or "", validate=True)
    except (binascii.Error, ValueError) as error:
        raise AnthropicError(f"invalid base64 image data: {error}") from None
    return str(source.get("data") or "")


def _texts(blocks: list[Any]) -> str:
    """The text blocks' texts, joined (other blocks are left out, as Ollama leaves them)."""
    return "".join(block["text"] for block in blocks
                   if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str))


def _tool_result(content: Any) -> tuple[str, list[str]]:
    """A tool_result's content (convertToolResultContent): a string, or text and image blocks."""
    if isinstance(content, str):
        return content, []
    blocks = content if isinstance(content, list) else []
    images = []
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "image":
            if not isinstance(block.get("source"), dict):
                raise AnthropicError("invalid tool_result image source")
            images.append(_image(block["source"]))
    return _texts(blocks), images


def _search_results(content: Any) -> str:
    """A web_search_tool_result's content as the tool message's text (formatWebSearchToolResultContent)."""
    if isinstance(content, str):
        return content
    items = content if isinstance(content, list) else [content]
    lines = []
    for item in items:
        if isinstance(item, dict) and item.get("type") == "web_search_tool_result_error":
            return "web_search_tool_result_error" + (f": {item['error_code']}" if item.get("error_code") else "")
        if isinstance(item, dict) and item.get("type") == "web_search_result":
            lines.append(f"- {item.get('title', '')}: {item.get('url', '')}\n")
    return "".join(lines) if isinstance(content, list) else json.dumps(content, separators=(",", ":"))


def _message(message: Any) -> list[dict[str, Any]]:
    """One Anthropic message as Ollama's messages (convertMessage): its text, images, calls and
    thinking in one message, and each tool_result a `tool` message of its own, before the user's text
    (the results answer the previous turn's calls) and after an assistant's."""
    if not isinstance(message, dict):
        raise AnthropicError("each message must be an object")
    role = str(message.get("role", "")).lower()
    text, images, calls, thinking, results = [], [], [], "", []
    for block in _blocks(message.get("content")):
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            text.append(block["text"])
        elif kind == "image":
            images.append(_image(block.get("source")))
        elif kind in ("tool_use", "server_tool_use"):
            for field in ("id", "name") if kind == "tool_use" else ():
                if not block.get(field):
                    raise AnthropicError(f"tool_use block missing required '{field}' field")
            calls.append({"id": block.get("id", ""), "function": {"name": block.get("name", ""),
                                                                  "arguments": block.get("input") or {}}})
        elif kind == "tool_result":
            content, result_images = _tool_result(block.get("content"))
            results.append({"role": "tool", "content": content, "tool_call_id": block.get("tool_use_id", ""),
                            **({"images": result_images} if result_images else {})})
        elif kind == "web_search_tool_result":
            results.append({"role": "tool", "content": _search_results(block.get("content")),
                            "tool_call_id": block.get("tool_use_id", "")})
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thinking = block["thinking"]  # other block types are skipped, as Ollama skips them
    own: list[dict[str, Any]] = []
    if text or images or calls or thinking:
        own = [{"role": role, "content": "".join(text), **({"images": images} if images else {}),
                **({"tool_calls": calls} if calls else {}), **({"thinking": thinking} if thinking else {})}]
    return results + own if role == "user" else own + results


BILLING = "x-anthropic-billing-header:"  # Claude Code's first system block; its `cch=` changes every request


def _system(system: Any) -> list[dict[str, Any]]:
    """`system`: a string, or text blocks joined (other blocks are left out, as Ollama does). Claude
    Code's billing block is left out too (as vLLM and SGLang do; Ollama keeps it): it tells the model
    nothing, and a prefix that changes every request would have every turn read its prompt again."""
    if isinstance(system, list):
        system = _texts([block for block in system if not str(_object(block).get("text")).startswith(BILLING)])
    return [{"role": "system", "content": system}] if isinstance(system, str) and system else []


def _tools(tools: Any) -> list[dict[str, Any]]:
    """Anthropic's tools as Ollama's functions (convertTool); a custom tool named web_search gives way
    to the built-in one."""
    if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
        raise AnthropicError("tools must be a list of objects")
    builtin = any(str(tool.get("type", "")).startswith("web_search") for tool in tools)
    out = []
    for tool in tools:
        if str(tool.get("type", "")).startswith("web_search"):
            function = {"name": "web_search", "description": "Search the web for current information. Use this to "
                        "find up-to-date information about any topic.",
                        "parameters": search_parameters("The search query to look up on the web")}
        elif builtin and tool.get("name") == "web_search":
            continue
        else:
            schema = tool.get("input_schema")
            if schema is not None and not isinstance(schema, dict):
                raise AnthropicError(f"invalid input_schema for tool {tool.get('name', '')!r}")
            function = {"name": tool.get("name", ""), **({"description": tool["description"]}
                                                          if tool.get("description") else {}),
                        "parameters": ollama_parameters(schema)}
        out.append({"type": "function", "function": function})
    return out


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _think(body: dict[str, Any]) -> dict[str, Any]:
    """`thinking` enabled or disabled is `think`; else `output_config.effort` a level; else unset."""
    thinking = _object(body.get("thinking"))
    if thinking.get("type") in ("enabled", "disabled"):
        return {"think": thinking["type"] == "enabled"}
    effort = EFFORTS.get(str(_object(body.get("output_config")).get("effort") or "").strip().lower())
    return {"think": effort} if effort else {}


def chat_body(body: Any) -> dict[str, Any]:
    """A Messages request as Ollama's /api/chat body (AnthropicMessagesMiddleware, FromMessagesRequest).
    `tool_choice` and `metadata` are read and not applied, as by Ollama."""
    if not isinstance(body, dict):
        raise AnthropicError("the body must be a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise AnthropicError("model is required")
    limit = body.get("max_tokens")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        raise AnthropicError("max_tokens is required and must be positive")
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        raise AnthropicError("messages is required")
    messages = _system(body.get("system")) + [m for message in body["messages"] for m in _message(message)]
    options: dict[str, Any] = {"num_predict": limit}
    for field, option in (("temperature", "temperature"), ("top_p", "top_p"), ("top_k", "top_k")):
        if body.get(field) is not None:
            options[option] = body[field]
    if body.get("stop_sequences"):
        options["stop"] = list(body["stop_sequences"])
    tools = _tools(body["tools"]) if body.get("tools") else []
    return {"model": body["model"], "messages": messages, "options": options, "stream": bool(body.get("stream")),
            **({"tools": tools} if tools else {}), **_think(body)}


def relaxed(chat: dict[str, Any], message: str) -> dict[str, Any] | None:
    """Ollama's `relax_thinking` (server/routes.go ChatHandler): a Messages request that asks a model
    without thinking to think is answered without thinking, not refused. The chat body to answer
    instead, where `message` is that refusal (or the reason a speculating front gives for passing the
    request on to be refused: utils/engine/planning.py NO_THINKING_REASON)."""
    if chat.get("think") not in (None, False) and "does not support thinking" in message:
        return {key: value for key, value in chat.items() if key != "think"}
    return None


def estimated_input_tokens(body: dict[str, Any]) -> int:
    """The input tokens message_start reports before any are counted (EstimateInputTokens): a quarter
    of the characters of the roles, texts, thinking, tool blocks and tool definitions. Ollama counts a
    tool's input_schema as the bytes the client sent; here it is written as Python writes JSON (", ",
    ": "), as the recorded client sent it (32's estimate, 41)."""
    def length(content: Any) -> int:
        if isinstance(content, str):
            return len(content)
        if isinstance(content, list):
            return sum(len(block.get("text") or "") + len(block.get("thinking") or "")
                       + (len(json.dumps(block, separators=(",", ":")))
                          if block.get("type") in ("tool_use", "tool_result") else 0)
                       for block in content if isinstance(block, dict))
        return 0 if content is None else len(json.dumps(content, separators=(",", ":")))

    total = length(body.get("system")) + sum(len(str(m.get("role", ""))) + length(m.get("content"))
                                             for m in body.get("messages") or [] if isinstance(m, dict))
    total += sum(len(str(t.get("name", ""))) + len(str(t.get("description", "")))
                 + (len(json.dumps(t["input_schema"])) if t.get("input_schema") else 0)
                 for t in body.get("tools") or [] if isinstance(t, dict))
    return total // 4 or (1 if body.get("messages") or body.get("system") is not None else 0)


# -- the answer -------------------------------------------------------------------------------------


def stop_reason(done_reason: str | None, tool_calls: bool) -> str | None:
    """mapStopReason: a tool call's answer is tool_use whatever ended it; a stop string ends as "stop"."""
    if tool_calls:
        return "tool_use"
    return {"stop": "end_turn", "length": "max_tokens", "": None, None: None}.get(done_reason, "stop_sequence")


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + json_bytes(data) + b"\n\n"


class Reply:
    """Ollama's answer messages (as /api/chat sends them) as one Anthropic message, or its events.
    `request`: the Messages request (the stream's first event estimates its input tokens)."""

    def __init__(self, model: str, request: dict[str, Any]):
        self.model, self.request = model, request
        self.id = f"msg_{secrets.token_hex(12)}"  # GenerateMessageID

    def whole(self, text: str, final: dict[str, Any]) -> dict[str, Any]:
        """ToMessagesResponse: thinking, text and tool_use blocks, the stop reason and the usage."""
        message = final.get("message") or {}
        content: list[dict[str, Any]] = []
        if message.get("thinking"):
            content.append({"type": "thinking", "thinking": message["thinking"]})
        if text:
            content.append({"type": "text", "text": text})
        calls = message.get("tool_calls") or []
        content += [{"type": "tool_use", "id": call.get("id", ""), "name": call["function"].get("name", ""),
                     "input": call["function"].get("arguments") or {}} for call in calls]
        reason = stop_reason(final.get("done_reason"), bool(calls))
        return {"id": self.id, "type": "message", "role": "assistant", "model": final.get("model", self.model),
                "content": content, **({"stop_reason": reason} if reason else {}),
                "usage": {"input_tokens": final.get("prompt_eval_count") or 0,
                          "output_tokens": final.get("eval_count") or 0}}

    def start(self, input_tokens: int | None = None) -> bytes:
        """message_start, with the input tokens counted if known, else estimated."""
        usage = {"input_tokens": input_tokens or estimated_input_tokens(self.request), "output_tokens": 0}
        return _event("message_start", {"type": "message_start", "message": {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "usage": usage}})

    async def sse(self, messages: AsyncIterator[dict[str, Any]], started: bool = False) -> AsyncIterator[bytes]:
        """StreamConverter.Process over the messages: message_start (unless `started`: sent already), a
        content block for the thinking, one for the text and one for each tool call (start, deltas,
        stop), then message_delta (stop reason, counted usage) and message_stop. A failure after the
        start is Anthropic's `error` event."""
        stream = _Blocks()
        stream.first = not started
        async for message in messages:
            if "error" in message:
                failure = {"type": "api_error", "message": str(message["error"])}
                yield _event("error", {"type": "error", "error": failure})
                return
            if stream.first:
                stream.first = False
                yield self.start(message.get("prompt_eval_count"))
            for kind, data in stream.process(message.get("message") or {}):
                yield _event(kind, data)
            if message.get("done"):
                for kind, data in stream.close():
                    yield _event(kind, data)
                reason = stop_reason(message.get("done_reason"), bool(stream.calls_sent))
                yield _event("message_delta", {"type": "message_delta",
                                               "delta": {"stop_reason": reason} if reason else {},
                                               "usage": {"input_tokens": message.get("prompt_eval_count") or 0,
                                                         "output_tokens": message.get("eval_count") or 0}})
                yield _event("message_stop", {"type": "message_stop"})


class _Blocks:
    """StreamConverter's content blocks: which is open, and the index of the next."""

    def __init__(self) -> None:
        self.first, self.index = True, 0
        self.thinking_started = self.thinking_done = self.text_started = False
        self.calls_sent: set[str] = set()

    def _stop(self) -> tuple[str, dict[str, Any]]:
        stop = ("content_block_stop", {"type": "content_block_stop", "index": self.index})
        self.index += 1
        return stop

    def _delta(self, delta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta}

    def _start(self, block: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "content_block_start", {"type": "content_block_start", "index": self.index, "content_block": block}

    def _end_thinking(self) -> list[tuple[str, dict[str, Any]]]:
        if self.thinking_started and not self.thinking_done:
            self.thinking_done = True
            return [self._stop()]
        return []

    def process(self, chat: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        events = []
        if chat.get("thinking") and not self.thinking_done:  # thinking after the text has begun: dropped
            if self.text_started:
                self.text_started = False
                events.append(self._stop())
            if not self.thinking_started:
                self.thinking_started = True
                events.append(self._start({"type": "thinking", "thinking": ""}))
            events.append(self._delta({"type": "thinking_delta", "thinking": chat["thinking"]}))
        if chat.get("content"):
            events += self._end_thinking()
            if not self.text_started:
                self.text_started = True
                events.append(self._start({"type": "text", "text": ""}))
            events.append(self._delta({"type": "text_delta", "text": chat["content"]}))
        for call in chat.get("tool_calls") or []:
            if call.get("id") in self.calls_sent:
                continue
            events += self._end_thinking()
            if self.text_started:
                self.text_started = False
                events.append(self._stop())
            function = call.get("function") or {}
            arguments = json.dumps(function.get("arguments") or {}, separators=(",", ":"), ensure_ascii=False)
            events += [self._start({"type": "tool_use", "id": call.get("id", ""), "name": function.get("name", ""),
                                    "input": {}}),
                       self._delta({"type": "input_json_delta", "partial_json": arguments}), self._stop()]
            self.calls_sent.add(call.get("id", ""))
        return events

    def close(self) -> list[tuple[str, dict[str, Any]]]:
        """The open block's stop, at the end of the answer."""
        return [self._stop()] if self.text_started or (self.thinking_started and not self.thinking_done) else []
