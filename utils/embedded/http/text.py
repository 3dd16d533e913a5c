"""Turning generated token bytes into the text Ollama streams: whole UTF-8 characters, stop strings."""

from __future__ import annotations

import codecs

from utils.stops import held_back


class TextAssembler:
    """Feeds token bytes in and releases text that is final.

    A multi-byte character split over tokens is held until complete. Text that could still be the
    start of a stop string is held until it either becomes one (the answer ends before it) or cannot.
    """

    def __init__(self, stop: list[str]):
        self.stop = [s for s in stop if s]
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.pending = ""
        self.stopped = False

    def feed(self, piece: bytes) -> str:
        if self.stopped:
            return ""  # tokens the worker made before it saw the stop
        self.pending += self.decoder.decode(piece)
        for stop in self.stop:
            at = self.pending.find(stop)
            if at >= 0:
                self.stopped = True
                text, self.pending = self.pending[:at], ""
                return text
        text = self.pending[: len(self.pending) - held_back(self.pending, self.stop)]
        self.pending = self.pending[len(text) :]
        return text

    @property
    def holding(self) -> bool:
        """Whether part of a character is held, waiting for the bytes that complete it."""
        return bool(self.decoder.getstate()[0])

    def flush(self) -> str:
        """The held-back text once the answer has ended for another reason."""
        if self.stopped:
            return ""
        text, self.pending = self.pending + self.decoder.decode(b"", final=True), ""
        return text
