"""Thinking as Ollama does it: which models think, what `think` asks, and the answer's text split
into `thinking` and content.

A model thinks when its chat template has a thinking switch (Qwen3's Jinja `enable_thinking`) or
writes `<think>` itself. For such a model an absent `think` means true (Ollama 0.12.4 on), the
template is rendered with `enable_thinking` set to the think value's truth, and, when thinking is on,
the generated text goes through ThinkingParser (utils/thinking.py, a port of Ollama's thinking/parser.go,
shared with the engine): what is inside `<think>...</think>` at the start of the answer is thinking,
the rest content. A model without a thinking template refuses `think` true or a level with Ollama's
400, and accepts false. (Real Ollama returns such a GGUF's reasoning inside the content: its tags
come from Go templates only. The embedded server splits it, as the template's form says.)
"""

from __future__ import annotations

from typing import Any

from utils.api.http import ApiError
from utils.thinking import ThinkingParser, template_thinks

LEVELS = ("high", "medium", "low", "max")  # api.ThinkValue's strings; each means thinking on


def think_mode(model: str, template: str | None, value: Any) -> bool | None:
    """What a request's `think` means for a model: None for a model that cannot think (then true
    or a level is Ollama's 400), else whether it thinks (absent: yes). Values as api.ThinkValue reads them."""
    if isinstance(value, str) and value not in LEVELS:
        raise ApiError(f'invalid think value: "{value}" (must be "high", "medium", "low", "max", true, or false)',
                       400)
    if value is not None and not isinstance(value, bool | str):
        raise ApiError('think must be a boolean or string ("high", "medium", "low", "max", true, or false)', 400)
    if not template_thinks(template):
        if value is True or isinstance(value, str):
            raise ApiError(f'"{model}" does not support thinking', 400)
        return None
    return value is not False


def refuse_format(think: bool | None, format: Any) -> None:
    """Ollama constrains a thinking answer's format only once its content begins (a second pass with
    the thinking as an assistant message); the embedded server constrains from the first token,
    which leaves no room to think, so it refuses rather than answer differently."""
    if think and format:
        raise ApiError("format while thinking is not supported by the embedded server: send \"think\": false "
                       "with format", 501)


def splitter(think: bool | None, prompt: str) -> ThinkingParser | None:
    """The parser for an answer (None when thinking is off). A prompt that already ends inside an
    opened `<think>` (Qwen3's generation prompt with thinking on) starts the parser inside it."""
    return ThinkingParser(prompt=prompt) if think else None
