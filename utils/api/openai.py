"""Ollama's OpenAI-compatible layer (`/v1/chat/completions`, `/v1/completions`), as translations:
an OpenAI request into Ollama's chat or generate body, and Ollama's answer messages into OpenAI's
objects and server-sent events. Field for field as Ollama's own layer (openai/openai.go); any server
that answers in Ollama's shape can speak OpenAI through it. A thinking model's thinking is the
message's or delta's `reasoning`, and `reasoning_effort` (or `reasoning.effort`) its `think`, as in
Ollama; a delta carries reasoning and content together where Ollama would send two chunks."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

from utils.api.http import json_bytes
from utils.errors import SpecError

FINGERPRINT = "fp_ollama"


class OpenAIError(SpecError, ValueError):
    """A request OpenAI's API would refuse: answered as `{"error": {"message", "type"}}` with 400."""

    def __init__(self, message: str):
        super().__init__(message, 400)


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def error_type(status: int) -> str:
    """OpenAI's error type for an HTTP status, as Ollama's NewError chooses it."""
    return {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")


def _ollama_tool_calls(calls: Any) -> list[dict[str, Any]]:
    """An assistant message's OpenAI tool calls (arguments as a JSON string) as Ollama's (an object)."""
    out = []
    for call in calls if isinstance(calls, list) else []:
        function = (call or {}).get("function") or {}
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except ValueError:
                raise OpenAIError("invalid tool call arguments") from None
        out.append({**({"id": call["id"]} if call.get("id") else {}),
                    "function": {"name": function.get("name", ""), "arguments": arguments}})
    return out


def openai_tool_calls(calls: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Ollama's tool calls in OpenAI's shape (Ollama's ToToolCalls)."""
    out = []
    for i, call in enumerate(calls or []):
        function = call.get("function") or {}
        out.append({"id": call.get("id") or f"call_{secrets.token_hex(4)}", "index": function.get("index", i),
                    "type": "function", "function": {"name": function.get("name", ""),
                                                     "arguments": json.dumps(function.get("arguments", {}))}})
    return out


def _text(content: Any) -> str:
    """A message's content: a string, or a list of parts of which only text is understood here."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise OpenAIError(f"content parts of type {part.get('type') if isinstance(part, dict) else part!r} "
                                  "are not supported here")
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise OpenAIError("message content must be a string or a list of parts")


def _options(body: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {
        # OpenAI's defaults, which Ollama's layer applies when the request leaves them out.
        "temperature": body["temperature"] if body.get("temperature") is not None else 1.0,
        "top_p": body["top_p"] if body.get("top_p") is not None else 1.0,
    }
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None:
        options["num_predict"] = limit
    if body.get("seed") is not None:
        options["seed"] = body["seed"]
    stop = body.get("stop")
    if stop:
        options["stop"] = [stop] if isinstance(stop, str) else list(stop)
    for penalty in ("frequency_penalty", "presence_penalty"):
        if body.get(penalty):
            options[penalty] = body[penalty]
    return options


def _common(body: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise OpenAIError("model is required")
    out: dict[str, Any] = {"model": body["model"], "stream": bool(body.get("stream")), "options": _options(body)}
    if body.get("n") not in (None, 1):
        raise OpenAIError("n > 1 is not supported: one choice per request")
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_object":
        out["format"] = "json"
    elif fmt.get("type") == "json_schema":
        out["format"] = (fmt.get("json_schema") or {}).get("schema", {})
    return out


# OpenAI's reasoning efforts as Ollama's think values (its thinkFromReasoningEffort: the ends clamped).
EFFORTS: dict[str, bool | str] = {"none": False, "minimal": "low", "low": "low", "medium": "medium", "high": "high",
                                  "max": "max", "xhigh": "max", "ultra": "max"}


def _think(body: dict[str, Any]) -> dict[str, Any]:
    reasoning = body.get("reasoning")
    effort = (reasoning.get("effort") if isinstance(reasoning, dict) else None) or body.get("reasoning_effort")
    if not effort:
        return {}  # the model's default
    if not isinstance(effort, str) or effort not in EFFORTS:
        raise OpenAIError(f'invalid reasoning value: "{effort}" (must be "minimal", "low", "medium", "high", '
                          '"xhigh", "ultra", "max", or "none")')
    return {"think": EFFORTS[effort]}


def chat_body(body: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat completion request as Ollama's /api/chat body."""
    if not isinstance(body, dict):
        raise OpenAIError("the body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIError("messages must be a non-empty list")
    out = {**_common(body), **_think(body)}
    converted = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise OpenAIError("each message needs a role")
        item: dict[str, Any] = {"role": message["role"], "content": _text(message.get("content"))}
        if message.get("tool_calls"):
            item["tool_calls"] = _ollama_tool_calls(message["tool_calls"])
        if message["role"] == "tool" and message.get("tool_call_id"):
            item["tool_call_id"] = message["tool_call_id"]
        converted.append(item)
    out["messages"] = converted
    if body.get("tools"):
        out["tools"] = body["tools"]
    return out


def completion_body(body: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI (legacy) completion request as Ollama's /api/generate body."""
    if not isinstance(body, dict):
        raise OpenAIError("the body must be a JSON object")
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise OpenAIError("prompt must be a string")
    out = _common(body)
    out["prompt"] = prompt
    if body.get("suffix"):
        out["suffix"] = body["suffix"]
    return out


class Reply:
    """Ollama's answer messages (dicts, as /api/chat or /api/generate sends them) in OpenAI's shape."""

    def __init__(self, model: str, chat: bool):
        self.model, self.chat = model, chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(6)
        self.created = int(time.time())
        self.tool_calls_sent = False

    def _head(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "system_fingerprint": FINGERPRINT}

    def _finish(self, message: dict[str, Any]) -> str:
        if message.get("done_reason") == "length":
            return "length"
        return "tool_calls" if self.tool_calls_sent else "stop"

    def _tool_calls(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        calls = openai_tool_calls((message.get("message") or {}).get("tool_calls"))
        self.tool_calls_sent = self.tool_calls_sent or bool(calls)
        return calls

    @staticmethod
    def usage(final: dict[str, Any]) -> dict[str, int]:
        prompt, completion = final.get("prompt_eval_count") or 0, final.get("eval_count") or 0
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    @staticmethod
    def _content(message: dict[str, Any]) -> str:
        if "message" in message:
            return (message.get("message") or {}).get("content", "")
        return message.get("response", "")

    def whole(self, text: str, final: dict[str, Any]) -> dict[str, Any]:
        """The non-streamed object for the whole answer."""
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if reasoning := (final.get("message") or {}).get("thinking"):
                message["reasoning"] = reasoning  # Ollama's field for a thinking model's thinking
            if calls := self._tool_calls(final):
                message["tool_calls"] = calls
            choice = {"index": 0, "message": message, "finish_reason": self._finish(final)}
            return {**self._head("chat.completion"), "choices": [choice], "usage": self.usage(final)}
        choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": self._finish(final)}
        return {**self._head("text_completion"), "choices": [choice], "usage": self.usage(final)}

    def chunk(self, message: dict[str, Any]) -> dict[str, Any]:
        """One streamed chunk for one Ollama message (the last carries the finish reason)."""
        done = bool(message.get("done"))
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": self._content(message)}
            if reasoning := (message.get("message") or {}).get("thinking"):
                delta["reasoning"] = reasoning  # in the same delta as content (Ollama sends two chunks)
            if calls := self._tool_calls(message):
                delta["tool_calls"] = calls
            finish = self._finish(message) if done else None
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return {**self._head("chat.completion.chunk"), "choices": [choice]}
        choice = {"text": self._content(message), "index": 0, "finish_reason": self._finish(message) if done else None}
        return {**self._head("text_completion"), "choices": [choice]}

    async def sse(self, messages: AsyncIterator[dict[str, Any]], include_usage: bool) -> AsyncIterator[bytes]:
        """Server-sent events: one per Ollama message, a usage event if asked, then [DONE]."""
        async for message in messages:
            if "error" in message:
                yield b"data: " + json_bytes(error_body(str(message["error"]), "api_error")) + b"\n\n"
                return
            yield b"data: " + json_bytes(self.chunk(message)) + b"\n\n"
            if message.get("done") and include_usage:
                usage = {**self._head("chat.completion.chunk" if self.chat else "text_completion"),
                         "choices": [], "usage": self.usage(message)}
                yield b"data: " + json_bytes(usage) + b"\n\n"
        yield b"data: [DONE]\n\n"
