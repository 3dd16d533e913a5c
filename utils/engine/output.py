"""The answer as the user gets it: token limit and stop strings, applied as the server would."""

from __future__ import annotations

from utils.engine.events import Origin, TextEvent
from utils.stops import held_back


class Output:
    """The answer as emitted: applies the token limit and stop strings, like the server would.

    Text that could be the start of a stop string is held back until it is known not to be one.
    """

    def __init__(self, stop: list[str], max_tokens: int):
        self.stop = [s for s in stop if s]
        self.max_tokens = max_tokens if max_tokens >= 0 else 1 << 30
        self.generated = ""  # every generated character, held back or not
        self.released = 0  # characters of `generated` already emitted
        self.pending: list[TextEvent] = []
        self.tokens = 0
        self.done_reason: str | None = None

    @property
    def remaining(self) -> int:
        return self.max_tokens - self.tokens

    def add(self, text: str, origin: Origin, tokens: int = 1) -> list[TextEvent]:
        self.generated += text
        self.tokens += tokens
        self.pending.append(TextEvent(text, origin))
        cut = min((at for s in self.stop if (at := self.generated.find(s, max(0, self.released - len(s) + 1))) >= 0),
                  default=None)
        if cut is not None:
            self.done_reason = "stop"
            return self._release(cut)
        if self.tokens >= self.max_tokens:
            self.done_reason = "length"
            return self._release(len(self.generated))
        return self._release(len(self.generated) - held_back(self.generated[self.released:], self.stop))

    def end(self, reason: str) -> list[TextEvent]:
        """The model stopped: whatever was held back for a stop string is final now."""
        self.done_reason = self.done_reason or reason
        return self._release(len(self.generated))

    def _release(self, upto: int) -> list[TextEvent]:
        """Emit pending pieces up to character `upto` of `generated`; split one piece if needed."""
        out: list[TextEvent] = []
        while self.pending and self.released < upto:
            piece = self.pending[0]
            take = min(len(piece.text), upto - self.released)
            out.append(TextEvent(piece.text[:take], piece.origin))
            self.released += take
            if take == len(piece.text):
                self.pending.pop(0)
            else:
                piece.text = piece.text[take:]
        if self.done_reason:
            self.pending.clear()
        return [event for event in out if event.text]

    @property
    def text(self) -> str:
        return self.generated[: self.released]
