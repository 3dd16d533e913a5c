"""Thinking as Ollama does it: which models think, what `think` asks, and the answer's text split
into `thinking` and content.

A model thinks when its chat template has a thinking switch (Qwen3's Jinja `enable_thinking`) or
writes `<think>` itself. For such a model an absent `think` means true (Ollama 0.12.4 on), the
template is rendered with `enable_thinking` set to the think value's truth, and, when thinking is on,
the generated text goes through ThinkingParser, a port of Ollama's thinking/parser.go: what is inside
`<think>...</think>` at the start of the answer is thinking, the rest content. A model without a
thinking template refuses `think` true or a level with Ollama's 400, and accepts false.
"""

from __future__ import annotations

from typing import Any

from utils.api.http import ApiError

OPENING, CLOSING = "<think>", "</think>"
LEVELS = ("high", "medium", "low", "max")  # api.ThinkValue's strings; each means thinking on


def thinks(template: str | None) -> bool:
    """Whether a chat template has a thinking switch or thinking tags (Ollama's `thinking` capability)."""
    return template is not None and ("enable_thinking" in template or OPENING in template)


def think_mode(model: str, template: str | None, value: Any) -> bool | None:
    """What a request's `think` means for a model: None for a model that cannot think (then true
    or a level is Ollama's 400), else whether it thinks (absent: yes). Values as api.ThinkValue reads them."""
    if isinstance(value, str) and value not in LEVELS:
        raise ApiError(f'invalid think value: "{value}" (must be "high", "medium", "low", "max", true, or false)',
                       400)
    if value is not None and not isinstance(value, bool | str):
        raise ApiError('think must be a boolean or string ("high", "medium", "low", "max", true, or false)', 400)
    if not thinks(template):
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
    if not think:
        return None
    parser = ThinkingParser()
    if prompt.strip().endswith(OPENING):
        parser.add(OPENING)
    return parser


class ThinkingParser:
    """Ollama's thinking.Parser: feed the answer's text piece by piece; each `add` returns the
    (thinking, content) that is final so far and holds back what may still be a tag. Whitespace
    before the opening tag, right after it and right after the closing tag is dropped; an answer
    that does not begin with the opening tag is all content, its leading whitespace kept. As in
    Ollama, text still held back when the answer ends (a partial tag, whitespace only) is dropped."""

    LOOKING, STARTED, THINKING, CLOSED, DONE = range(5)

    def __init__(self) -> None:
        self.state = self.LOOKING
        self.held = ""

    def add(self, text: str) -> tuple[str, str]:
        self.held += text
        thinking, content = [], []
        going = True
        while going:  # several states may pass in one piece; the caller never waits for what is clear
            more_thinking, more_content, going = self._eat()
            thinking.append(more_thinking)
            content.append(more_content)
        return "".join(thinking), "".join(content)

    def _eat(self) -> tuple[str, str, bool]:
        """One step: (thinking, content, whether to step again)."""
        held = self.held
        if self.state == self.LOOKING:
            trimmed = held.lstrip()
            if trimmed.startswith(OPENING):
                self.held = trimmed[len(OPENING):].lstrip()
                self.state = self.THINKING if self.held else self.STARTED
                return "", "", True
            if OPENING.startswith(trimmed):  # whitespace, or the start of the tag: wait for more
                return "", "", False
            self.state, self.held = self.DONE, ""
            return "", held, False  # no thinking: the text as it came, whitespace and all
        if self.state == self.STARTED:
            self.held = held.lstrip()
            if not self.held:
                return "", "", False
            self.state = self.THINKING
            return "", "", True
        if self.state == self.THINKING:
            if CLOSING in held:
                thinking, _, rest = held.partition(CLOSING)
                rest = rest.lstrip()
                self.state, self.held = (self.DONE if rest else self.CLOSED), ""
                return thinking, rest, False
            keep = _overlap(held, CLOSING)
            self.held = held[len(held) - keep:]
            return held[: len(held) - keep], "", False
        self.held = ""
        if self.state == self.CLOSED:
            held = held.lstrip()
            if held:
                self.state = self.DONE
        return "", held, False


def _overlap(text: str, tag: str) -> int:
    """The length of the longest end of `text` that begins `tag`."""
    for size in range(min(len(tag), len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0
