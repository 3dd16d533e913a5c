"""Ollama's OpenAI Responses layer (`POST /v1/responses`, what Codex-style clients speak), as
translations: a Responses request into Ollama's /api/chat body, and Ollama's answer messages into the
response object and its server-sent events. Ported field for field from Ollama v0.32.15's
openai/responses.go (FromResponsesRequest, ToResponse, ResponsesStreamConverter) and
middleware/openai.go (ResponsesMiddleware: ids, `stream`, `completed_at`); used by the embedded
server's routes (utils/api/shaped_routes.py) and the proxy's (shaped_answer).

Ollama keeps nothing between requests: `previous_response_id`, `store` and `tool_choice` are not
applied, and the response says so (`store: false`, `tool_choice: "auto"`). The built-in `web_search`
tool is offered to the model as a plain function (Ollama runs the search on ollama.com; here its call
comes back as a function_call item).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import AsyncIterator
from typing import Any

from utils.api.http import json_bytes
from utils.api.openai import EFFORTS, OpenAIError
from utils.api.tool_schema import ollama_parameters, search_parameters

CONTENT_TYPES = ("input_text", "input_image", "output_text", "input_file")


def _go_number(value: Any) -> Any:
    """A float64 as Go writes it: 1.0 as 1 (the recorded answers' `"temperature":0`)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _sorted(value: Any) -> Any:
    """A value with its objects' keys sorted, as Go writes a map[string]any (every streamed event)."""
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    return [_sorted(item) for item in value] if isinstance(value, list) else value


# -- the request ------------------------------------------------------------------------------------


def _content(content: Any, where: str) -> tuple[str, list[str]]:
    """Input content (a string, or parts) as Ollama's text and images (convertResponsesContent)."""
    if content is None or isinstance(content, str):
        return content or "", []
    if not isinstance(content, list):
        raise OpenAIError(f"{where}: content must be a string or array")
    text, images = [], []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in CONTENT_TYPES:
            raise OpenAIError(f"{where}: content[{i}]: unknown content type: {kind or ''}")
        if kind == "input_file":
            raise OpenAIError("file inputs are not currently supported")
        if kind == "input_image" and part.get("image_url"):  # a file_id is skipped, as Ollama skips it
            url = str(part["image_url"])
            if not url.startswith("data:") or "," not in url:
                raise OpenAIError("invalid image input")
            images.append(url.split(",", 1)[1])
        elif kind != "input_image":
            text.append(str(part.get("text", "")))
    return "".join(text), images


def _call(item: dict[str, Any]) -> dict[str, Any]:
    try:
        arguments = json.loads(item["arguments"]) if item.get("arguments") else {}
    except ValueError as error:
        raise OpenAIError(f"failed to parse function call arguments: {error}") from None
    return {"id": item.get("call_id", ""), "function": {"name": item.get("name", ""), "arguments": arguments}}


def _messages(items: list[Any]) -> list[dict[str, Any]]:
    """Input items as Ollama's messages (FromResponsesRequest's loop): a function_call joins the
    assistant message before it, a reasoning item's text is the next assistant message's thinking, and
    an assistant message between a call and its output joins the call's message."""
    messages: list[dict[str, Any]] = []
    thinking = ""
    for i, item in enumerate(items):
        kind = item.get("type") if isinstance(item, dict) else None
        if isinstance(item, dict) and not kind and item.get("role"):
            kind = "message"
        if kind == "reasoning":
            thinking = str(item.get("encrypted_content") or "")
        elif kind == "message":
            text, images = _content(item.get("content"), f"input[{i}]")
            message = {"role": item.get("role", ""), "content": text, **({"images": images} if images else {})}
            if message["role"] == "assistant" and thinking:
                message["thinking"], thinking = thinking, ""
            following = items[i + 1] if i + 1 < len(items) else None
            output_of = following.get("call_id") if isinstance(following, dict) and \
                following.get("type") == "function_call_output" else None
            last = messages[-1] if messages else None
            if message["role"] == "assistant" and output_of and last and last["role"] == "assistant" and \
                    any(call["id"] == output_of for call in last.get("tool_calls") or []):
                last["content"] += ("\n" if last["content"] and text else "") + text
                if images:
                    last.setdefault("images", []).extend(images)
                if message.get("thinking"):
                    last["thinking"] = message["thinking"]
                continue
            messages.append(message)
        elif kind == "function_call":
            if not (messages and messages[-1]["role"] == "assistant"):
                messages.append({"role": "assistant", "content": ""})
            messages[-1].setdefault("tool_calls", []).append(_call(item))
            if thinking:
                messages[-1]["thinking"], thinking = thinking, ""
        elif kind == "function_call_output":
            output = item.get("output")
            text, images = (output or "", []) if not isinstance(output, list) else _content(output, f"input[{i}]")
            messages.append({"role": "tool", "content": text, "tool_call_id": item.get("call_id", ""),
                             **({"images": images} if images else {})})
        elif kind != "web_search_call":  # a past search: nothing for the model
            raise OpenAIError(f"input[{i}]: input item missing required 'type' field" if not kind
                              else f'input[{i}]: unknown input item type: "{kind}"')
    return messages + ([{"role": "assistant", "content": "", "thinking": thinking}] if thinking else [])


def _tools(tools: list[Any], search: bool) -> list[dict[str, Any]]:
    """Responses tools as Ollama's functions (convertTools): a namespace's members prefixed with its
    name; a custom tool named web_search gives way to the built-in one."""
    out = []
    for tool in tools:
        if not isinstance(tool, dict):
            raise OpenAIError("tools must be a list of objects")
        if tool.get("type") == "web_search":
            function = {"name": "web_search", "description": "Search the web for current information.",
                        "parameters": search_parameters("The search query.")}
            out.append({"type": "function", "function": function})
        elif tool.get("type") == "namespace":
            prefix = f"{tool['name']}." if tool.get("name") else ""
            for member in _tools(tool.get("tools") or [], False):
                if prefix and not member["function"]["name"].startswith(prefix):
                    member["function"]["name"] = prefix + member["function"]["name"]
                out.append(member)
        elif not (search and tool.get("name") == "web_search"):
            function = {"name": tool.get("name", ""), **({"description": tool["description"]}
                                                          if tool.get("description") else {}),
                        "parameters": ollama_parameters(tool.get("parameters"))}
            out.append({"type": tool.get("type", ""), "function": function})
    return out


def chat_body(body: Any) -> dict[str, Any]:
    """A Responses request as Ollama's /api/chat body (ResponsesMiddleware, FromResponsesRequest):
    `instructions` is the system message, `input` the conversation, `max_output_tokens` num_predict,
    temperature 1 unless given, `reasoning.effort` think, `text.format` json_schema the format."""
    if not isinstance(body, dict):
        raise OpenAIError("the body must be a JSON object")
    source = body.get("input")
    if source is not None and not isinstance(source, str | list):
        raise OpenAIError("input must be a string or array")
    messages = [{"role": "system", "content": body["instructions"]}] if body.get("instructions") else []
    messages += [{"role": "user", "content": source}] if isinstance(source, str) and source else []
    messages += _messages(source) if isinstance(source, list) else []
    options: dict[str, Any] = {"temperature": body["temperature"] if body.get("temperature") is not None else 1.0}
    if body.get("top_p") is not None:
        options["top_p"] = body["top_p"]
    if body.get("max_output_tokens") is not None:
        options["num_predict"] = body["max_output_tokens"]
    effort = _object(body.get("reasoning")).get("effort")
    if effort and effort not in EFFORTS:
        raise OpenAIError(f'invalid reasoning value: "{effort}" (must be "minimal", "low", "medium", "high", '
                          '"xhigh", "ultra", "max", or "none")')
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise OpenAIError("tools must be a list of objects")
    converted = _tools(tools, any(isinstance(t, dict) and t.get("type") == "web_search" for t in tools))
    text_format = _object(_object(body.get("text")).get("format"))
    schema = text_format.get("schema") if text_format.get("type") == "json_schema" else None
    return {"model": body.get("model", ""), "messages": messages, "options": options,
            "stream": body.get("stream") is True, **({"tools": converted} if converted else {}),
            **({"format": schema} if schema is not None else {}), **({"think": EFFORTS[effort]} if effort else {})}


# -- the answer -------------------------------------------------------------------------------------


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(item_id: str, status: str, text: str | None) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": status, "role": "assistant",
            "content": [] if text is None else [_text_part(text)]}


def _function_calls(calls: list[dict[str, Any]], ids: list[str]) -> list[dict[str, Any]]:
    """Ollama's tool calls as completed function_call items (ToToolCalls: arguments as compact JSON)."""
    return [{"id": item_id, "type": "function_call", "status": "completed", "call_id": call.get("id", ""),
             "name": (call.get("function") or {}).get("name", ""),
             "arguments": json.dumps((call.get("function") or {}).get("arguments") or {}, separators=(",", ":"),
                                     ensure_ascii=False)} for item_id, call in zip(ids, calls)]


def _reasoning_item(item_id: str, thinking: str) -> dict[str, Any]:
    return {"id": item_id, "type": "reasoning", "summary": [{"type": "summary_text", "text": thinking}],
            "encrypted_content": thinking}  # plain text, as Ollama sends it


class Reply:
    """Ollama's answer messages (as /api/chat sends them) as one response object, or its events.
    `request`: the Responses request, whose settings the response repeats."""

    def __init__(self, model: str, request: dict[str, Any]):
        self.model, self.request = model, request
        self.id, self.item_id = f"resp_{random.randrange(999999)}", f"msg_{random.randrange(999999)}"
        self.sequence = 0

    def _tools(self) -> list[dict[str, Any]]:
        """The request's tools as ResponsesTool writes them (parameters: a Go map, its keys sorted)."""
        return [{"type": tool.get("type", ""), "name": tool.get("name", ""), "description": tool.get("description"),
                 "strict": tool.get("strict"), "parameters": _sorted(tool.get("parameters")),
                 **({"tools": tool["tools"]} if tool.get("tools") else {})}
                for tool in self.request.get("tools") or [] if isinstance(tool, dict)]

    def _response(self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None) -> dict[str, Any]:
        """The response object, in ResponsesResponse's field order."""
        request = self.request
        reasoning, text = _object(request.get("reasoning")), _object(request.get("text"))
        now = int(time.time())
        return {
            "id": self.id, "object": "response", "created_at": now, "completed_at": now if usage else None,
            "status": status, "incomplete_details": None, "model": self.model, "previous_response_id": None,
            "instructions": request.get("instructions") or None, "output": output, "error": None,
            "tools": self._tools(), "tool_choice": "auto", "truncation": request.get("truncation") or "disabled",
            "parallel_tool_calls": True, "text": {"format": text.get("format") or {"type": "text"}},
            "top_p": _go_number(request.get("top_p") if request.get("top_p") is not None else 1.0),
            "presence_penalty": 0, "frequency_penalty": 0, "top_logprobs": 0,
            "temperature": _go_number(request.get("temperature") if request.get("temperature") is not None else 1.0),
            "reasoning": {key: reasoning.get(key) for key in ("effort", "summary")}
            if reasoning.get("effort") or reasoning.get("summary") else None,
            "usage": usage, "max_output_tokens": request.get("max_output_tokens"), "max_tool_calls": None,
            "store": False, "background": bool(request.get("background")), "service_tier": "default",
            "metadata": {}, "safety_identifier": None, "prompt_cache_key": None,
        }

    @staticmethod
    def usage(final: dict[str, Any]) -> dict[str, Any]:
        prompt, output = final.get("prompt_eval_count") or 0, final.get("eval_count") or 0
        return {"input_tokens": prompt, "output_tokens": output, "total_tokens": prompt + output,
                "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}

    def whole(self, text: str, final: dict[str, Any]) -> dict[str, Any]:
        """ToResponse: a reasoning item for the thinking, then the tool calls' items, or else the message."""
        message = final.get("message") or {}
        output = [_reasoning_item(f"rs_{self.id}", message["thinking"])] if message.get("thinking") else []
        calls = message.get("tool_calls") or []
        output += _function_calls(calls, [f"fc_{self.id}_{i}" for i in range(len(calls))]) if calls else \
            [_message_item(self.item_id, "completed", text)]
        response = self._response("completed", output, self.usage(final))
        if response["reasoning"]:  # ResponsesReasoningOutput leaves an unset field out (the stream's map: null)
            response["reasoning"] = {key: value for key, value in response["reasoning"].items() if value}
        return response

    def _event(self, kind: str, **data: Any) -> bytes:
        """One event, numbered, its keys sorted as Go writes the converter's maps."""
        data.update(type=kind, sequence_number=self.sequence)
        self.sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + json_bytes(_sorted(data)) + b"\n\n"

    async def sse(self, messages: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
        """ResponsesStreamConverter.Process over the messages: response.created and .in_progress, the
        reasoning item, the function_call items or the message item (its part, text deltas and dones),
        then response.completed with the whole output. A failure after the start is an `error` event."""
        done: list[dict[str, Any]] = []  # the completed items, in order
        thinking: list[str] | None = None  # the open reasoning item's text
        text: list[str] | None = None  # the open message's text
        reasoning_id, calls_sent, index = "", False, 0

        def finish_reasoning() -> list[bytes]:
            nonlocal thinking, index
            if thinking is None:
                return []
            item, thinking = _reasoning_item(reasoning_id, "".join(thinking)), None
            done.append(item)
            index += 1
            return [self._event("response.reasoning_summary_text.done", item_id=reasoning_id, output_index=index - 1,
                                summary_index=0, text=item["encrypted_content"]),
                    self._event("response.output_item.done", output_index=index - 1, item=item)]

        async for message in messages:
            if "error" in message:
                yield self._event("error", code="api_error", message=str(message["error"]), param=None)
                return
            if self.sequence == 0:
                for kind in ("response.created", "response.in_progress"):
                    yield self._event(kind, response=self._response("in_progress", [], None))
            chat = message.get("message") or {}
            if chat.get("thinking"):
                if thinking is None:
                    thinking, reasoning_id = [], f"rs_{random.randrange(999999)}"
                    yield self._event("response.output_item.added", output_index=index,
                                      item={"id": reasoning_id, "type": "reasoning", "summary": []})
                thinking.append(chat["thinking"])
                yield self._event("response.reasoning_summary_text.delta", item_id=reasoning_id, output_index=index,
                                  summary_index=0, delta=chat["thinking"])
            if calls := chat.get("tool_calls"):
                for event in finish_reasoning():
                    yield event
                ids = [f"fc_{random.randrange(999999)}_{i}" for i in range(len(calls))]
                for item in _function_calls(calls, ids):
                    done.append(item)
                    yield self._event("response.output_item.added", output_index=index,
                                      item={**item, "status": "in_progress", "arguments": ""})
                    for kind, field in (("delta", "delta"), ("done", "arguments")):
                        yield self._event(f"response.function_call_arguments.{kind}", item_id=item["id"],
                                          output_index=index, **{field: item["arguments"]})
                    yield self._event("response.output_item.done", output_index=index, item=item)
                    index += 1
                calls_sent = True
            elif not calls_sent and chat.get("content"):
                for event in finish_reasoning():
                    yield event
                if text is None:
                    text = []
                    yield self._event("response.output_item.added", output_index=index,
                                      item=_message_item(self.item_id, "in_progress", None))
                    yield self._event("response.content_part.added", item_id=self.item_id, output_index=index,
                                      content_index=0, part=_text_part(""))
                text.append(chat["content"])
                yield self._event("response.output_text.delta", item_id=self.item_id, output_index=index,
                                  content_index=0, delta=chat["content"], logprobs=[])
            if message.get("done"):
                for event in finish_reasoning():
                    yield event
                if text is not None and not calls_sent:
                    whole, where = "".join(text), {"item_id": self.item_id, "output_index": index, "content_index": 0}
                    yield self._event("response.output_text.done", **where, text=whole, logprobs=[])
                    yield self._event("response.content_part.done", **where, part=_text_part(whole))
                    yield self._event("response.output_item.done", output_index=index,
                                      item=_message_item(self.item_id, "completed", whole))
                output = done + ([_message_item(self.item_id, "completed", "".join(text))] if text is not None else [])
                yield self._event("response.completed",
                                  response=self._response("completed", output, self.usage(message)))
