"""A tool's JSON schema as Ollama holds it: decoded into api.ToolFunctionParameters and its
ToolProperty values (Ollama v0.32.15 api/types.go), so written back in their field order and without
the keys those structs do not have. The Anthropic and Responses layers convert a tool's schema so
(anthropic.go convertTool, responses.go convertTool); the template then renders the tools as Ollama's
would, and the prompt is the same."""

from __future__ import annotations

from typing import Any

PARAMETERS = ("type", "$defs", "items", "required", "properties")  # ToolFunctionParameters
PROPERTY = ("anyOf", "type", "items", "description", "enum", "properties", "required")  # ToolProperty


def _property(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    out = {key: value[key] for key in PROPERTY if value.get(key) not in (None, "", [], {})}
    if isinstance(out.get("anyOf"), list):
        out["anyOf"] = [_property(item) for item in out["anyOf"]]
    if isinstance(out.get("properties"), dict):
        out["properties"] = {name: _property(item) for name, item in out["properties"].items()}
    return out


def ollama_parameters(schema: Any) -> dict[str, Any]:
    """`schema` (an object, or None for none) as Ollama's ToolFunctionParameters writes it: `type`
    always, `properties` always (null where none), the others where set."""
    schema = schema if isinstance(schema, dict) else {}
    out: dict[str, Any] = {"type": schema.get("type", "")}
    for key in PARAMETERS[1:4]:
        if schema.get(key) not in (None, [], {}):
            out[key] = schema[key]
    properties = schema.get("properties")
    out["properties"] = {name: _property(item) for name, item in properties.items()} \
        if isinstance(properties, dict) else None
    return out


def search_parameters(description: str) -> dict[str, Any]:
    """The parameters of the `web_search` function both layers offer for a built-in web search tool."""
    return {"type": "object", "required": ["query"],
            "properties": {"query": {"type": "string", "description": description}}}
