"""Where draft tokens come from. A drafter proposes up to K text pieces and learns from the verdict.

A new draft source is one class with `propose` (and, if it learns, `update`); the validator and the
decoding loop never look inside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from utils.engine.client import OllamaServer, Token

SAMPLING_KEYS = ("temperature", "top_k", "top_p", "min_p")


@dataclass
class Draft:
    pieces: list[str] = field(default_factory=list)
    # For rejection sampling: the draft's top log-probabilities at each position (raw, as Ollama gives).
    top_logprobs: list[dict[str, float]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.pieces)


class Drafter:
    """The interface: propose a draft for `context`, then learn how much of it was accepted."""

    name = "none"
    needs_server = False

    async def propose(self, context: str, k: int, options: dict[str, Any]) -> Draft:
        raise NotImplementedError

    def update(self, draft: Draft, accepted: int) -> None:
        """Called after every verification; most drafters learn nothing here."""


class ModelDrafter(Drafter):
    """A small model on an Ollama server, streamed raw with logprobs.

    Drafting stops at K pieces, at a piece whose probability is below `p_min`, at a piece that is only
    part of a character, or at the end of text; a draft shorter than `n_min` is dropped. Stopping
    closes the stream, so the server stops too.
    """

    needs_server = True

    def __init__(self, server: OllamaServer, model: str, *, p_min: float, n_min: int, top_k: int, num_ctx: int):
        self.server, self.model = server, model
        self.name = model
        self.p_min, self.n_min, self.top_k, self.num_ctx = p_min, n_min, top_k, num_ctx

    async def propose(self, context: str, k: int, options: dict[str, Any]) -> Draft:
        """`options` holds the sampling settings; temperature 0 drafts the most likely pieces."""
        draft = Draft()
        if k <= 0:
            return draft
        request = {key: options[key] for key in SAMPLING_KEYS if key in options}
        # The draft samples from at most its top_k candidates, all of which it reports back.
        request.update(num_predict=k, num_ctx=self.num_ctx, top_k=min(request.get("top_k", self.top_k), self.top_k))
        if "seed" in options:
            request["seed"] = options["seed"]
        async for chunk in self.server.stream_raw(self.model, context, request, self.top_k):
            if self._extend(draft, chunk.tokens, k) or chunk.done_reason is not None:
                break
        if len(draft) < self.n_min:
            return Draft()
        return draft


    def _extend(self, draft: Draft, tokens: list[Token], k: int) -> bool:
        """Add confident, whole-character tokens to `draft`; True once drafting should stop."""
        for token in tokens:
            confident = token.logprob is None or math.exp(token.logprob) >= self.p_min
            if not (token.complete and token.text and confident):
                return True
            draft.pieces.append(token.text)
            draft.top_logprobs.append(token.top)
            if len(draft) == k:
                return True
        return False


class PromptLookupDrafter(Drafter):
    """No model: the text that followed the latest earlier occurrence of the context's last words.

    Editing and summarising answers repeat long runs of their prompt, which this finds for free. The
    continuation is cut into the target's own token pieces (greedy longest match over its vocabulary)
    because the validator accepts a piece only when it equals the target's token there.
    """

    name = "lookup"

    def __init__(self, vocabulary: set[str], *, min_match: int = 12, max_match: int = 64):
        self.vocabulary = vocabulary
        self.longest_piece = max((len(p) for p in vocabulary), default=1)
        self.min_match, self.max_match = min_match, max_match

    async def propose(self, context: str, k: int, options: dict[str, Any]) -> Draft:
        if k <= 0:
            return Draft()
        continuation = self._continuation(context, k * self.longest_piece)
        return Draft(pieces=self._split(continuation, k))

    def _continuation(self, context: str, limit: int) -> str:
        """Longest suffix (min_match..max_match chars) that occurred earlier: what came after it."""
        for size in (self.max_match, 32, 16, self.min_match):
            if size > len(context) // 2:
                continue
            suffix = context[-size:]
            at = context.rfind(suffix, 0, len(context) - 1)
            if at >= 0:
                start = at + size
                return context[start : start + limit]
        return ""

    def _split(self, text: str, k: int) -> list[str]:
        pieces: list[str] = []
        at = 0
        while at < len(text) and len(pieces) < k:
            for size in range(min(self.longest_piece, len(text) - at), 0, -1):
                if text[at : at + size] in self.vocabulary:
                    pieces.append(text[at : at + size])
                    at += size
                    break
            else:
                break  # not a piece of this vocabulary: the target will not produce it as one token
        return pieces


# -- the target's vocabulary, for prompt lookup -----------------------------------------------------


def _byte_decoder() -> dict[str, int]:
    """GPT-2 byte-level BPE writes each byte as a printable character; this undoes that."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1)
    )
    codes = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return {chr(code): byte for byte, code in zip(printable, codes)}


def vocabulary_from_show(show: dict[str, Any]) -> set[str]:
    """The text of every token of a model, from `/api/show` with `verbose` (GGUF token strings)."""
    info = show.get("model_info") or {}
    tokens: list[str] = info.get("tokenizer.ggml.tokens") or []
    kind = info.get("tokenizer.ggml.model", "")
    pieces: set[str] = set()
    if kind == "gpt2":
        decoder = _byte_decoder()
        for token in tokens:
            try:
                pieces.add(bytes(decoder[c] for c in token).decode("utf-8"))
            except (KeyError, UnicodeDecodeError):
                continue  # special tokens and partial characters
    else:  # SentencePiece: '▁' stands for a space
        pieces = {token.replace("\u2581", " ") for token in tokens if not token.startswith("<")}
    pieces.discard("")
    return pieces
