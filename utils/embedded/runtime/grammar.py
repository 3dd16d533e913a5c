"""Structured output: `format` ("json" or a JSON schema) as a llama.cpp grammar that constrains sampling.

The embedded server samples in Python (utils/sampling.py), so the grammar is applied as llama.cpp's
grammar sampler over the logits before a token is chosen. Checking the whole vocabulary costs a
pass over every token's text, so, as llama.cpp's own common sampler does, the token is first chosen
as usual and only checked; the full pass runs only when the grammar rejects that token.
"""

from __future__ import annotations

import ctypes
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from utils.api.http import ApiError
from utils.sampling import SamplingOptions, sample

if TYPE_CHECKING:
    from utils.embedded.runtime.runner import ModelRunner

# The layout of llama.cpp's llama_token_data: id, logit, p.
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


def grammar_for(format: Any) -> str | None:
    """The GBNF grammar for a request's `format`, None when it asks for none. Ollama's rules: null and
    "" mean none, "json" any JSON object, an object a JSON schema; anything else is refused."""
    from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

    if format is None or format == "":
        return None
    if format == "json":
        return JSON_GBNF
    if not isinstance(format, dict):
        raise ApiError(f'invalid format: {json.dumps(format)}; expected "json" or a valid JSON Schema object', 400)
    try:
        return json_schema_to_gbnf(json.dumps(format))
    except Exception as error:  # noqa: BLE001 - the converter raises plain exceptions for unsupported schemas
        raise ApiError(f"invalid JSON schema in format: {error}", 400) from None


def constraint_for(runner: ModelRunner, format: Any) -> GrammarConstraint | None:
    """The constraint for a request's `format` on a loaded model, None for none."""
    from llama_cpp import llama_cpp

    grammar = grammar_for(format)
    if grammar is None:
        return None
    vocab = llama_cpp.llama_model_get_vocab(runner.llama._model.model)
    return GrammarConstraint(vocab, runner.vocab_size, grammar)


class GrammarConstraint:
    """One answer's grammar state on one model's vocabulary; used by that model's worker thread only."""

    sampler = None  # until llama.cpp has made one

    def __init__(self, vocab: Any, vocab_size: int, grammar: str):
        from llama_cpp import llama_cpp

        self._llama = llama_cpp
        self.sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
        if not self.sampler:
            raise ApiError("invalid JSON schema in format: llama.cpp could not parse its grammar", 400)
        self.candidates = np.zeros(vocab_size, dtype=_TOKEN_DATA)
        self.candidates["id"] = np.arange(vocab_size, dtype=np.int32)
        self.one = np.zeros(1, dtype=_TOKEN_DATA)

    def _apply(self, data: np.ndarray) -> None:
        array = self._llama.llama_token_data_array(
            data=data.ctypes.data_as(self._llama.llama_token_data_p), size=data.shape[0], selected=-1, sorted=False)
        self._llama.llama_sampler_apply(self.sampler, ctypes.byref(array))

    def allows(self, token: int) -> bool:
        self.one[0] = (token, 0.0, 0.0)
        self._apply(self.one)
        return bool(np.isfinite(self.one["logit"][0]))

    def choose(self, logits: np.ndarray, options: SamplingOptions, rng: np.random.Generator | None) -> int:
        """The token sampling picks among those the grammar allows next."""
        token = sample(logits, options, rng)
        if self.allows(token):
            return token
        self.candidates["logit"] = logits
        self._apply(self.candidates)
        masked = self.candidates["logit"].copy()
        if not np.isfinite(masked).any():
            raise RuntimeError("the grammar allows no token here")
        return sample(masked, options, rng)

    def accept(self, token: int) -> None:
        self._llama.llama_sampler_accept(self.sampler, token)

    def close(self) -> None:
        if self.sampler:
            self._llama.llama_sampler_free(self.sampler)
            self.sampler = None

    __del__ = close  # a job that never reached a group (its prompt failed to tokenize) frees it here
