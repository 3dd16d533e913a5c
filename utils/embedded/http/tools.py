"""Tools on the embedded server: which models take them, the request's tools for the template, and
`tojson` for the templates. The calls in an answer are parsed as Ollama 0.32.15 parses them, by
utils/tool_calls.py (a port of Ollama's tools/tools.go), with the tag read from the model's template
(its Modelfile TEMPLATE, else its GGUF's: `<tool_call>` for Qwen 2.5): a call written without its
tag, as the bare JSON that qwen2.5-coder:1.5b answers, is content, as Ollama returns it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from utils.api.http import ApiError
from utils.api.schemas import ChatBody
from utils.tool_calls import tool_tag

if TYPE_CHECKING:  # not at run time: this module is used without llama.cpp too
    from utils.embedded.runtime.runner import ModelRunner


def offers_tools(template: str | None) -> bool:
    """Whether a chat template renders `tools` (what Ollama checks to give a model the tools capability)."""
    return template is not None and "tools" in template


def chat_template(runner: ModelRunner) -> str | None:
    """The template the model's chats render with (chat_prompt.py): its Modelfile TEMPLATE, else its GGUF's."""
    return runner.template or runner.metadata.get("tokenizer.chat_template")


def tool_call_tag(runner: ModelRunner) -> str:
    """The text that starts a call in the model's answers, read from its chat template."""
    return tool_tag(chat_template(runner) or "")


def chat_tools(runner: ModelRunner, body: ChatBody) -> list[dict[str, Any]] | None:
    """The request's tools for the template, or Ollama's refusal for a model whose template has none."""
    if not body.tools:
        return None
    if not isinstance(body.tools, list) or not all(isinstance(t, dict) for t in body.tools):
        raise ApiError("invalid request: tools must be a list of objects", 400)
    if not offers_tools(chat_template(runner)):
        raise ApiError(f"registry.ollama.ai/library/{body.model} does not support tools", 400)
    return body.tools


def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
           sort_keys: bool = False) -> str:
    """Chat templates' `tojson` as Hugging Face renders them (what the templates were written for):
    plain JSON, keys in their order, no HTML escaping (Jinja's own filter sorts keys and escapes <>&')."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
