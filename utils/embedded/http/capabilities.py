"""What a loaded model can do, and Ollama's refusals for what it cannot: images without a vision
projector, `suffix` (fill-in-the-middle) for a model without FIM tokens (and `think` for a model
without a thinking template, thinking.py). A request field the server cannot honour is refused,
never dropped.

Fill-in-the-middle uses the model's own FIM tokens from its GGUF vocabulary (qwen2.5-coder:
<|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>), in the order Ollama's templates write them.
"""

from __future__ import annotations

from typing import Any

from utils.api.http import ApiError
from utils.embedded.http.tools import offers_tools
from utils.embedded.runtime import model_file
from utils.embedded.runtime.model_file import ModelFile
from utils.embedded.runtime.runner import ModelRunner
from utils.thinking import template_thinks as thinks

NO_VISION = "this model is missing data required for image input"  # Ollama's ErrNoVisionModel


def capabilities(file: ModelFile, template: str | None = None) -> list[str]:
    """Ollama's `capabilities` in /api/show, for what this server implements, from the model's file and
    its template (a Modelfile TEMPLATE, else the GGUF's own)."""
    found = ["embedding"] if any(key.endswith("pooling_type") for key in file.metadata) else ["completion"]
    if file.fim:
        found.append("insert")
    template = template or file.metadata.get("tokenizer.chat_template")
    if offers_tools(template):
        found.append("tools")
    if thinks(template):
        found.append("thinking")
    return found


def refuse_unsupported(extra: dict[str, Any], messages: list[dict[str, Any]] | None = None) -> None:
    """Images, which no model here supports (none has a vision projector)."""
    if extra.get("images") or any(message.get("images") for message in messages or []):
        raise ApiError(NO_VISION, 400)


def refuse_template_and_context(template: str | None, context: list[int] | None) -> None:
    """/api/generate's `template` (a Go template) and `context` (an earlier answer's token encoding):
    neither can be applied here, and dropping them would answer another question."""
    if template:
        raise ApiError("template is not supported by the embedded server: it renders prompts with the model's "
                       "own chat template; send raw: true with the prompt already formatted instead", 501)
    if context:
        raise ApiError("context is not supported by the embedded server: send the conversation as messages to "
                       "/api/chat instead", 501)


def fill_in_middle(runner: ModelRunner, model: str, prompt: str, suffix: str, *, system: str | None,
                   raw: bool) -> str:
    """The prompt for a non-raw generate with `suffix`: prefix token, prompt, suffix token, suffix,
    middle token. Ollama's check first (a model without FIM tokens does not support insert)."""
    pieces = model_file.read(runner.path).fim
    if pieces is None:
        raise ApiError(f"{model} does not support insert (it has no fill-in-the-middle tokens)", 400)
    if raw:
        raise ApiError("raw mode does not support suffix: write the model's fill-in-the-middle tokens "
                       "into the prompt, or leave raw out", 400)
    if system:
        raise ApiError("suffix (fill-in-the-middle) does not use a system prompt: leave system out", 400)
    prefix, middle_suffix, middle = pieces
    return f"{prefix}{prompt}{middle_suffix}{suffix}{middle}"
