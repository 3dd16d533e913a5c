"""A model's tokenizer as the engine sees it through the Ollama API: the text of its tokens, and whether
a draft model shares the target's tokenizer.

A draft model with the target's tokenizer ("same") proposes pieces that are usually whole target
tokens and allows rejection sampling; one with another tokenizer ("cross") still works, because the
validator compares text, but is accepted less often; the target itself or a model that cannot be
read is "unusable".
"""

from __future__ import annotations

import hashlib
from typing import Any

from utils.engine.memory import EngineMemory
from utils.engine.pieces import Pieces, byte_decoder
from utils.engine.target import Target


def vocabulary_from_show(show: dict[str, Any]) -> set[str]:
    """The text of every token of a model, from `/api/show` with `verbose` (GGUF token strings)."""
    info = show.get("model_info") or {}
    tokens: list[str] = info.get("tokenizer.ggml.tokens") or []
    kind = info.get("tokenizer.ggml.model", "")
    pieces: set[str] = set()
    if kind == "gpt2":
        decoder = byte_decoder()
        for token in tokens:
            try:
                pieces.add(bytes(decoder[c] for c in token).decode("utf-8"))
            except (KeyError, UnicodeDecodeError):
                continue  # special tokens and partial characters
    else:  # SentencePiece: '▁' stands for a space
        pieces = {token.replace("\u2581", " ") for token in tokens if not token.startswith("<")}
    pieces.discard("")
    return pieces


async def vocabulary(server: Target, model: str, memory: EngineMemory | None = None) -> tuple[str, Pieces]:
    """(fingerprint of the tokenizer, the text of its tokens and how it cuts text into them), kept in
    `memory` per server and model."""
    known = memory.vocabularies if memory is not None else {}
    key = (server.url, model)
    if key not in known:
        show = await server.show(model, verbose=True)
        info = show.get("model_info") or {}
        tokens = info.get("tokenizer.ggml.tokens") or []
        fingerprint = hashlib.sha256("\x00".join(tokens).encode()).hexdigest() if tokens else ""
        # A byte-level BPE's merges and pre-tokenizer, where the server lists them (pieces.py).
        merges = (info.get("tokenizer.ggml.merges") or []) if info.get("tokenizer.ggml.model") == "gpt2" else []
        known[key] = (fingerprint, Pieces(vocabulary_from_show(show), merges, info.get("tokenizer.ggml.pre") or ""))
    return known[key]


async def tokenizer_relation(target: Target, target_model: str, draft: Target, draft_model: str,
                             memory: EngineMemory | None = None) -> str:
    if draft.url == target.url and draft_model == target_model:
        return "unusable"
    target_print, _ = await vocabulary(target, target_model, memory)
    draft_print, _ = await vocabulary(draft, draft_model, memory)  # a missing draft raises its ServerError
    if not target_print or not draft_print:
        return "cross"  # a server that does not list tokens: assume the worst that still works
    return "same" if target_print == draft_print else "cross"
