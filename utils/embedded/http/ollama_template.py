"""A chat rendered as Ollama renders it with a Go TEMPLATE (a bundled model's library Modelfile,
utils/embedded/store/ollama_library.json): Ollama's ChatHandler and template.Execute (server/routes.go,
template/template.go), executed by utils/go_template.py.

What Ollama does before the template sees the chat, done here alike:
- the Modelfile's SYSTEM is the first message when the chat does not begin with a system message;
- `collate`: every system message's text, joined by blank lines, is `.System`; consecutive messages
  of one role (tool results excepted) are merged into one, their texts joined by a blank line;
- the tools and calls are Ollama's template types: a tool's `.Function` prints as a Go struct
  (`{get_weather Current weather for a city. {object <nil> <nil> [city] {"city":{"type":"string"}}}}`,
  recording 26), its properties and a call's `.Arguments` as Go's encoding/json writes them (keys
  sorted, `<>&` escaped); a schema's fields that Ollama's types do not have (title, default...) are
  not in them.
"""

from __future__ import annotations

import json
import re
from typing import Any

from utils.go_template import GoTemplateError, Stringer, Struct, execute

_HTML = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


class Ordered(dict[str, Any]):
    """A JSON object Go writes in insertion order (a struct, or Ollama's ordered maps), not sorted."""


def go_json(value: Any) -> str:
    """encoding/json.Marshal of a value decoded from JSON: maps' keys sorted, HTML characters escaped."""
    if isinstance(value, Ordered):
        return "{" + ",".join(f"{go_json(k)}:{go_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{go_json(k)}:{go_json(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(map(go_json, value)) + "]"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    if isinstance(value, str):
        return re.sub("[<>&\u2028\u2029]", lambda m: _HTML[m.group()], json.dumps(value, ensure_ascii=False))
    return json.dumps(value)


def _property(schema: Any) -> Ordered:
    """A JSON schema as Ollama's api.ToolProperty keeps it: its fields in order, empty ones left out."""
    schema = schema if isinstance(schema, dict) else {}
    kept = Ordered()
    if schema.get("anyOf"):
        kept["anyOf"] = [_property(item) for item in schema["anyOf"]]
    kind = schema.get("type")
    if kind:  # PropertyType: one type is written as a string
        kept["type"] = kind[0] if isinstance(kind, list) and len(kind) == 1 else kind
    for name in ("items", "description", "enum"):
        if schema.get(name) is not None and (name == "items" or schema[name]):
            kept[name] = schema[name]
    if isinstance(schema.get("properties"), dict):
        kept["properties"] = Ordered((k, _property(v)) for k, v in schema["properties"].items())
    if schema.get("required"):
        kept["required"] = schema["required"]
    return kept


def _property_struct(kept: Ordered) -> Struct:
    kind = kept.get("type")
    kinds = [kind] if isinstance(kind, str) else list(kind or [])
    return Struct(AnyOf=[_property_struct(p) for p in kept.get("anyOf", [])],
                  Type=Stringer(kinds, kinds[0] if len(kinds) == 1 else "[" + " ".join(kinds) + "]" if kinds else "",
                                go_json(kinds[0] if len(kinds) == 1 else kinds or None)),
                  Items=kept.get("items"), Description=kept.get("description", ""), Enum=kept.get("enum", []),
                  Properties=kept.get("properties"), Required=kept.get("required", []))


def _properties(schema: dict[str, Any]) -> tuple[Stringer, dict[str, Ordered] | None]:
    """templateProperties: a Go map of name -> ToolProperty (ranged and written in name order)."""
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else None
    if properties is None:
        return Stringer(None, "{}", "null"), None
    kept = {name: _property(value) for name, value in properties.items()}
    text = go_json(kept)
    return Stringer({name: _property_struct(value) for name, value in kept.items()}, text, text), kept


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _tool(tool: dict[str, Any]) -> tuple[Struct, Ordered]:
    """templateTool, and how encoding/json writes it."""
    function = _object(tool.get("function"))
    parameters = _object(function.get("parameters"))
    properties, kept = _properties(parameters)
    required = [str(name) for name in parameters.get("required") or []]
    struct = Struct(Type=tool.get("type", ""), Items=tool.get("items"), Function=Struct(
        Name=function.get("name", ""), Description=function.get("description", ""), Parameters=Struct(
            Type=parameters.get("type", ""), Defs=parameters.get("$defs"), Items=parameters.get("items"),
            Required=required, Properties=properties)))
    written_parameters = Ordered(type=parameters.get("type", ""))
    for key in ("$defs", "items"):
        if parameters.get(key) is not None:
            written_parameters[key] = parameters[key]
    if required:
        written_parameters["required"] = required
    written_parameters["properties"] = kept
    written = Ordered(type=tool.get("type", ""))
    if tool.get("items") is not None:
        written["items"] = tool["items"]
    written["function"] = Ordered(name=function.get("name", ""), description=function.get("description", ""),
                                  parameters=written_parameters)
    return struct, written


def _arguments(arguments: Any) -> Stringer:
    """templateArgs: a Go map, written as JSON in key order."""
    if isinstance(arguments, str):  # a client's JSON text (OpenAI's form)
        try:
            arguments = json.loads(arguments)
        except ValueError:
            arguments = None
    if not isinstance(arguments, dict):
        return Stringer(None, "{}", "null")
    text = go_json(arguments)
    return Stringer(arguments, text, text)


def _message(message: dict[str, Any]) -> Struct:
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {} if isinstance(call, dict) else {}
        calls.append(Struct(ID=call.get("id", ""), Function=Struct(
            Index=function.get("index", 0), Name=function.get("name", ""),
            Arguments=_arguments(function.get("arguments")))))
    return Struct(Role=message.get("role", ""), Content=message.get("content") or "",
                  Thinking=message.get("thinking") or "", Images=message.get("images") or [],
                  ToolCalls=calls or None, ToolName=message.get("tool_name") or "",
                  ToolCallID=message.get("tool_call_id") or "")


def collate(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Ollama's collate: all system texts joined, and consecutive messages of a role (not tool) merged."""
    system = [m.get("content") or "" for m in messages if m.get("role") == "system"]
    merged: list[dict[str, Any]] = []
    for message in messages:
        if merged and merged[-1].get("role") == message.get("role") and message.get("role") != "tool":
            joined = f"{merged[-1].get('content') or ''}\n\n{message.get('content') or ''}"
            merged[-1] = {**merged[-1], "content": joined}
        else:
            merged.append(message)
    return "\n\n".join(system), merged


def render(template: str, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
           think: bool | None) -> str:
    """The prompt Ollama renders for a chat with this TEMPLATE and SYSTEM (GoTemplateError if it cannot)."""
    if system and (not messages or messages[0].get("role") != "system"):
        messages = [{"role": "system", "content": system}, *messages]
    joined, collated = collate(messages)
    converted = [_tool(tool) for tool in tools or []]
    written = go_json([w for _, w in converted])
    data = {"System": joined, "Messages": [_message(m) for m in collated],
            "Tools": Stringer([s for s, _ in converted], written, written) if tools else None,
            "Response": "", "Think": bool(think), "ThinkLevel": "", "IsThinkSet": think is not None}
    return execute(template, data, {"json": _json})


def _json(value: Any) -> str:
    """Ollama's `json` template function (json.Marshal)."""
    if isinstance(value, Stringer):
        return value.json if value.json is not None else go_json(value.value)
    if isinstance(value, Struct):
        raise GoTemplateError("json of a struct is not supported")
    return go_json(value)
