"""A chat's prompt: the model's template rendered, and fitted to the context the way Ollama's
chatPrompt fits it. A model with a Modelfile TEMPLATE (the bundled models carry their Ollama library
family's, utils/embedded/store/ollama_library.json) renders with it and its SYSTEM as Ollama does
(ollama_template.py); any other renders with its GGUF's own Jinja chat template (jinja2, sandboxed), as
Ollama does for a model created FROM a GGUF alone.

A chat longer than the context (`num_ctx`) drops its oldest turns first, keeping every system message
and always the newest message; what is kept begins at a user message. A prompt that still does not
fit, and a generate prompt, are cut by tokens on the model's worker (runtime/truncation.py). Either
way the answer says what was left out, in a `truncated` field of its last message, and the server's
log has a line for it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jinja2.sandbox import ImmutableSandboxedEnvironment

from utils.api.http import ApiError
from utils.embedded.http import ollama_template
from utils.embedded.http.tools import tojson
from utils.go_template import GoTemplateError

if TYPE_CHECKING:  # for its type only: importing runner.py loads llama.cpp
    from utils.embedded.runtime.runner import ModelRunner

# This server does not shift the context during generation (Ollama does): a chat is fitted into
# the context less this share, so that its answer has room.
ANSWER_SHARE = 4  # num_ctx // ANSWER_SHARE tokens kept free for the answer

Messages = list[dict[str, Any]]

_jinja = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)


def _raise(message: str) -> None:
    raise ApiError(f"template error: {message}", 400)


_jinja.globals.update(raise_exception=_raise, strftime_now=lambda fmt: datetime.now().strftime(fmt))
_jinja.filters["tojson"] = tojson


@functools.lru_cache(maxsize=64)
def _compiled(template: str) -> Any:
    """A chat template compiled once (jinja2 compiles it to Python: milliseconds for Qwen's), not per request."""
    return _jinja.from_string(template)


def render_chat(runner: ModelRunner, messages: Messages, tools: list[dict[str, Any]] | None = None,
                think: bool | None = None) -> str:
    """The exact prompt the model's template makes, ending where the assistant speaks; a thinking
    model's Jinja template gets `enable_thinking` (thinking.py), others nothing more."""
    if runner.template:
        try:
            return ollama_template.render(runner.template, runner.system, messages, tools, think)
        except GoTemplateError as error:  # as Ollama, whose template.Execute fails the request
            raise ApiError(f"template: {error}", 500) from None
    template = runner.metadata.get("tokenizer.chat_template")
    if not template:  # a base model: plain concatenation, as Ollama's default "{{ .Prompt }}"
        return "".join(m["content"] for m in messages)
    switch = {} if think is None else {"enable_thinking": think}
    try:
        return _compiled(template).render(
            messages=messages, tools=tools, add_generation_prompt=True, bos_token="", eos_token="", **switch
        )
    except ApiError:
        raise
    except Exception as error:  # noqa: BLE001 - odd extra fields (tool_calls: "abc") must be a 400, not a 500
        raise ApiError(f"template error: {type(error).__name__}: {error}", 400) from None


def fit_messages(messages: Messages, render: Callable[[Messages], str], count: Callable[[str], int], num_ctx: int,
                 truncate: bool = True) -> tuple[str, int]:
    """(the prompt, how many messages were left out) for a chat that must fit the context.
    `truncate` False (the request's): the whole chat, which the worker refuses if it is too long."""
    limit = num_ctx - num_ctx // ANSWER_SHARE
    prompt = render(messages)
    if not truncate or len(prompt.encode("utf-8", errors="surrogatepass")) < limit or count(prompt) <= limit:
        return prompt, 0  # a token is at least one byte: a short prompt needs no tokenizing
    # Where the kept turns may begin: at a user message (templates such as Gemma's refuse a chat
    # whose turns do not alternate from one, and a tool result without its call means nothing),
    # or at the last message, which is always kept.
    starts = [i for i in range(1, len(messages)) if messages[i].get("role") == "user"]
    starts = sorted(set(starts) | {len(messages) - 1})
    low, high = 0, len(starts) - 1  # the first start that fits, by bisection (more dropped, fewer tokens)
    best = None
    while low <= high:
        middle = (low + high) // 2
        candidate = _from(messages, starts[middle], render)
        if count(candidate) <= limit:
            best, high = (candidate, starts[middle]), middle - 1
        else:
            low = middle + 1
    prompt, start = best if best else (_from(messages, len(messages) - 1, render), len(messages) - 1)
    dropped = sum(1 for m in messages[:start] if m.get("role") != "system")
    if dropped:
        print(f"[embedded] truncating input messages which exceed context length: left out {dropped} of "
              f"{len(messages)}", file=sys.stderr, flush=True)
    return prompt, dropped


def _from(messages: Messages, start: int, render: Callable[[Messages], str]) -> str:
    """The prompt of messages[start:], with the system messages before `start` kept."""
    return render([m for m in messages[:start] if m.get("role") == "system"] + messages[start:])
