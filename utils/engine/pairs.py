"""Which drafts fit a target, and building a decoder for a (target, drafter) choice.

A draft model with the target's tokenizer ("same") proposes pieces that are usually whole target
tokens and allows rejection sampling; one with another tokenizer ("cross") still works, because the
validator compares text, but is accepted less often; the target itself or a model that cannot be
read is "unusable".
"""

from __future__ import annotations

import hashlib

from config import Settings
from utils.engine.client import OllamaServer, ServerError
from utils.engine.drafters.base import Drafter, ModelDrafter, PromptLookupDrafter, vocabulary_from_show
from utils.engine.decoder import SpeculativeDecoder

LOOKUP = "lookup"
NONE = "none"

_vocabularies: dict[tuple[str, str], tuple[str, set[str]]] = {}


async def vocabulary(server: OllamaServer, model: str) -> tuple[str, set[str]]:
    """(fingerprint of the tokenizer, the text of its tokens), cached per server and model."""
    key = (server.url, model)
    if key not in _vocabularies:
        show = await server.show(model, verbose=True)
        tokens = (show.get("model_info") or {}).get("tokenizer.ggml.tokens") or []
        fingerprint = hashlib.sha256("\x00".join(tokens).encode()).hexdigest() if tokens else ""
        _vocabularies[key] = (fingerprint, vocabulary_from_show(show))
    return _vocabularies[key]


async def tokenizer_relation(target: OllamaServer, target_model: str, draft: OllamaServer, draft_model: str) -> str:
    if draft.url == target.url and draft_model == target_model:
        return "unusable"
    target_print, _ = await vocabulary(target, target_model)
    draft_print, _ = await vocabulary(draft, draft_model)  # a missing draft raises its ServerError
    if not target_print or not draft_print:
        return "cross"  # a server that does not list tokens: assume the worst that still works
    return "same" if target_print == draft_print else "cross"


async def build_decoder(settings: Settings, target: OllamaServer, target_model: str, drafter_choice: str,
                        draft_server: OllamaServer | None = None) -> SpeculativeDecoder:
    """A decoder for `drafter_choice`: "none" (standard), "lookup", or a draft model's name.

    Raises ServerError with the server's message for a missing target or draft model.
    """
    await target.show(target_model)  # fails early, with Ollama's message, for an unknown target
    drafter: Drafter | None = None
    same_tokenizer = False
    if drafter_choice == LOOKUP:
        _, pieces = await vocabulary(target, target_model)
        drafter = PromptLookupDrafter(pieces)
        same_tokenizer = False  # its pieces carry no probabilities: sample-match when sampling
    elif drafter_choice and drafter_choice != NONE:
        draft_server = draft_server or target
        relation = await tokenizer_relation(target, target_model, draft_server, drafter_choice)
        if relation == "unusable":
            raise ServerError(f"'{drafter_choice}' cannot draft for '{target_model}' on this server")
        same_tokenizer = relation == "same"
        drafter = ModelDrafter(draft_server, drafter_choice, p_min=settings.p_min, n_min=settings.n_min,
                               top_k=settings.draft_top_k, num_ctx=settings.num_ctx)
    return SpeculativeDecoder(target, target_model, drafter, settings, same_tokenizer=same_tokenizer)
