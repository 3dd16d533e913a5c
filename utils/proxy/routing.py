"""Speculate or forward: which requests the engine answers exactly, and what they ask for.

A request is speculated only when every field it carries is one the engine honours exactly; any
other field (`images`, an option the validator would not keep exact, ...) sends it upstream
unchanged, with the reason recorded. Nothing is ignored silently. `format` goes to the engine, whose
plan speculates it where the server resumes a grammar mid-answer (in process) and passes it on
elsewhere (planning.standard_reason). A chat's `tools` and its history of calls and results are
rendered by upstream's template; the answer is parsed into content and calls as upstream parses it
(utils/tool_calls.py), or passed on where upstream uses a parser of its own (planning.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from utils.api.schemas import ChatBody, GenerateBody
from utils.engine.request import GenerationRequest

# Options the engine applies exactly as Ollama would; any other option is forwarded.
SPECULATED_OPTIONS = {"temperature", "top_k", "top_p", "min_p", "seed", "num_predict", "stop", "num_ctx"}
# Request fields the engine honours (model and stream are read here; keep_alive is passed upstream).
# `think` is honoured by the engine's plan: rendered as sent and the answer split as upstream splits it
# (planning.py); where upstream uses a built-in parser, the request is passed on.
GENERATE_FIELDS = {"model", "prompt", "system", "raw", "stream", "options", "keep_alive", "think", "format"}
CHAT_FIELDS = {"model", "messages", "stream", "options", "keep_alive", "think", "format", "tools"}
# What a message may carry for the template to render: an assistant's calls, a tool's result and name.
MESSAGE_FIELDS = {"role", "content", "tool_calls", "tool_name", "tool_call_id"}


@dataclass
class Speculation:
    """A request the engine answers: which model, what to generate, how to reply."""

    model: str
    request: GenerationRequest  # its options are the client's, as sent: nothing is added upstream
    stream: bool
    keep_alive: Any
    tools: bool = False  # it carried tools or a tool history (carries_tools)


@dataclass
class Forward:
    """A request for upstream: `code` is a short label for metrics, `reason` a sentence for people;
    `tools`: it carried tools or a tool history (counted apart in the metrics)."""

    code: str
    reason: str
    tools: bool = False


def carries_tools(body: Any) -> bool:
    """Whether a chat body has `tools`, or a history of tool calls or results: an agent's request."""
    if not isinstance(body, dict):
        return False
    messages = body.get("messages")
    return bool(body.get("tools")) or (isinstance(messages, list) and any(
        isinstance(m, dict) and (m.get("tool_calls") or m.get("role") == "tool") for m in messages))


def plan(body: Any, chat: bool, pairs: dict[str, str], k: int | None = None) -> Speculation | Forward:
    """How to serve one /api/generate (chat=False) or /api/chat body; `k`: a fixed draft length."""
    if not isinstance(body, dict):
        return Forward("invalid", "the body is not a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or model not in pairs:
        return Forward("no_pair", f"no drafter is paired with model {model!r}")
    known = CHAT_FIELDS if chat else GENERATE_FIELDS
    for field, value in body.items():
        if field not in known and value not in (None, False, "", [], {}):
            return Forward(field.lstrip("_"), f"`{field}` is served by upstream: speculation does not apply it")
    options = body.get("options") or {}
    if not isinstance(options, dict):
        return Forward("invalid", "options is not an object")
    for option in options:
        if option not in SPECULATED_OPTIONS:
            return Forward(f"option:{option}", f"option `{option}` is not kept exact by speculation")
    parsed: ChatBody | GenerateBody
    try:
        parsed = ChatBody.model_validate(body) if chat else GenerateBody.model_validate(body)
        parsed.check()
    except (ValidationError, ValueError, Exception) as error:  # noqa: BLE001 - upstream answers with its own message
        return Forward("invalid", f"upstream judges this request: {error}")
    if parsed.options.num_predict < -1 or parsed.options.num_predict == 0:
        return Forward("invalid", "num_predict below -1 or 0 is upstream's to answer")
    # The options exactly as sent (null ones are unset, as Ollama reads them): the engine passes them
    # on, and upstream merges them with the model's own parameters as for a direct request.
    sent = {key: value for key, value in options.items() if value is not None}
    think, shape = body.get("think"), body.get("format")
    shape = None if shape in (None, "") else shape  # as Ollama reads it; {} is a schema (any JSON value)
    if shape is not None and shape != "json" and not isinstance(shape, dict):
        return Forward("invalid", "a format that is neither \"json\" nor a schema is upstream's to refuse")
    if isinstance(parsed, ChatBody):
        messages = body.get("messages") or []
        for message in messages:
            extra = [f for f, v in message.items() if f not in MESSAGE_FIELDS and v not in (None, "", [], {})]
            if extra:
                return Forward(extra[0], f"messages with `{extra[0]}` are served by upstream")
        if not messages:
            return Forward("load", "a chat without messages loads the model: upstream does that")
        tools = body.get("tools") or None
        if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
            return Forward("invalid", "tools that are not a list of objects are upstream's to refuse")
        kept = [{field: value for field, value in message.items() if field in MESSAGE_FIELDS and value is not None}
                for message in messages]
        request = GenerationRequest(messages=[{**m, "role": p.role, "content": p.content}
                                              for m, p in zip(kept, parsed.messages)],
                                    options=sent, max_tokens=parsed.options.num_predict, k=k, think=think,
                                    format=shape, tools=tools)
    else:  # a GenerateBody
        if not parsed.prompt:
            return Forward("load", "an empty prompt loads the model: upstream does that")
        request = GenerationRequest(prompt=parsed.prompt, raw=parsed.raw, system=parsed.system,
                                    options=sent, max_tokens=parsed.options.num_predict, k=k, think=think,
                                    format=shape)
    return Speculation(model, request, parsed.stream, body.get("keep_alive"), carries_tools(body))
