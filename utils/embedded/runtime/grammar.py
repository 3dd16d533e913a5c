"""Structured output: `format` ("json" or a JSON schema) as a llama.cpp grammar that constrains sampling.

A schema becomes a grammar by llama.cpp's own JSON-schema-to-grammar conversion, the one llama-server
and Ollama apply (common/json-schema-to-grammar.cpp, behind a C entry point that scripts/install.sh
adds to the build: scripts/patches/README.md): integer ranges, string lengths, patterns and formats,
enums, item counts, `$ref`, `anyOf` and the same whitespace rule, so the server allows exactly the
texts Ollama allows (number ranges, `multipleOf` and `uniqueItems` stay unchecked, as there). What
it cannot convert is refused as Ollama refuses it; a pattern it would loosen to any string (it only
warns) is refused too, since the answer would not hold it.
"json" is Ollama's own grammar of a JSON object (GRAMMAR_JSON).

The embedded server samples in Python (utils/sampling.py), so the grammar is applied as llama.cpp's
grammar sampler over the logits before a token is chosen. Checking the whole vocabulary costs a
pass over every token's text, so, as llama.cpp's own common sampler does, the token is first chosen
as usual and only checked; the full pass runs only when the grammar rejects that token.
"""

from __future__ import annotations

import ctypes
import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from utils.api.http import ApiError
from utils.sampling import SamplingOptions, sample

if TYPE_CHECKING:
    from utils.embedded.runtime.runner import ModelRunner

# The layout of llama.cpp's llama_token_data: id, logit, p.
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])

# `format: "json"`: any JSON object, in the language of Ollama's grammar for it (llm/llama_server.go
# grammarJSON): `/` escapes, numbers of any length, whitespace as any run of spaces, tabs and
# newlines inside the object, and none after it: the answer ends at its closing brace, where only
# the end of the text is allowed (a grammar that allowed whitespace there let the model run on in
# newlines to its token limit where Ollama stops).
GRAMMAR_JSON = r"""
root ::= object
value ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? ws "}"
array ::= "[" ws ( value ("," ws value)* )? ws "]"
string ::= "\"" (
  [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])
)* "\""
number ::= ("-"? ([0-9] | [1-9] [0-9]*)) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
ws ::= ([ \t\n] ws)?
"""
INVALID_SCHEMA = "invalid JSON schema in format"  # Ollama's message, with its status 500


class SchemaError(ValueError):
    """A schema llama.cpp's conversion refuses, with its reason."""


@functools.cache
def _converter() -> ctypes.CDLL:
    import llama_cpp

    library = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libllama-schema.so"))
    library.llama_schema_to_grammar.restype = ctypes.c_void_p
    library.llama_schema_to_grammar.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    library.llama_schema_free.argtypes = [ctypes.c_void_p]
    return library


def schema_grammar(schema: dict[str, Any]) -> str:
    """llama.cpp's GBNF grammar for a JSON schema (about 0.1 ms for a small one); SchemaError when it
    cannot convert it."""
    library, error = _converter(), ctypes.c_void_p()
    grammar = library.llama_schema_to_grammar(json.dumps(schema).encode(), ctypes.byref(error))
    if not grammar:
        reason = ctypes.string_at(error.value).decode(errors="replace") if error.value else "no reason given"
        library.llama_schema_free(error)
        raise SchemaError(" ".join(reason.split()))
    text = ctypes.string_at(grammar).decode()
    library.llama_schema_free(grammar)
    return text


def _patterns(schema: Any) -> list[str]:
    """Every `pattern` of a string schema inside `schema`."""
    if isinstance(schema, list):
        return [found for item in schema for found in _patterns(item)]
    if not isinstance(schema, dict):
        return []
    own = [schema["pattern"]] if isinstance(schema.get("pattern"), str) else []
    return own + [found for key, value in schema.items() if key not in ("enum", "const", "default", "examples")
                  for found in _patterns(value)]


def grammar_for(format: Any) -> str | None:
    """The GBNF grammar for a request's `format`, None when it asks for none. Ollama's rules: null and
    "" mean none, "json" any JSON object, an object a JSON schema; anything else is refused."""
    if format is None or format == "":
        return None
    if format == "json":
        return GRAMMAR_JSON
    if not isinstance(format, dict):
        raise ApiError(f'invalid format: {json.dumps(format)}; expected "json" or a valid JSON Schema object', 400)
    try:
        for pattern in _patterns(format):  # llama.cpp accepts any string for a pattern it cannot convert
            if "root ::= string\n" in schema_grammar({"type": "string", "pattern": pattern}):
                raise SchemaError(f"pattern {pattern!r} cannot be held: llama.cpp's conversion (Ollama's too) "
                                  "turns only patterns anchored with ^ and $, in the regex syntax it knows, "
                                  "into a grammar, and would let any string through")
        return schema_grammar(format)
    except SchemaError as error:
        raise ApiError(f"{INVALID_SCHEMA}: {error}", 500) from None


def constraint_for(runner: ModelRunner, format: Any) -> GrammarConstraint | None:
    """The constraint for a request's `format` on a loaded model, None for none."""
    from llama_cpp import llama_cpp

    grammar = grammar_for(format)
    if grammar is None:
        return None
    vocab = llama_cpp.llama_model_get_vocab(runner.llama._model.model)
    return GrammarConstraint(vocab, runner.vocab_size, grammar)


class GrammarCursor:
    """A `format`'s grammar resumed mid-answer, for a speculated answer in process: the state after the
    answer's text so far (kept, and advanced as the answer grows), from which each request forks its
    own constraint, after a draft's text where it verifies one.

    A grammar consumes characters, whatever tokens carry them, so text is fed to it as the model's
    tokenizer cuts it. Text the grammar does not allow (a draft that leaves the schema) is not fed:
    the fork is None. Used on the event loop's thread; the forks go to the model's worker."""

    def __init__(self, runner: ModelRunner, format: Any):
        from llama_cpp import llama_cpp

        from utils.embedded.runtime.llama_params import tokenizer

        self.grammar = grammar_for(format)
        assert self.grammar is not None, "a cursor is made for a format"
        self.vocab, self.vocab_size = llama_cpp.llama_model_get_vocab(runner.llama._model.model), runner.vocab_size
        self.tokenize = tokenizer(self.vocab)
        self.state, self.text = GrammarConstraint(self.vocab, self.vocab_size, self.grammar), ""

    def fork(self, answer: str, draft: str = "") -> GrammarConstraint | None:
        """A constraint for the token after `answer` + `draft`; `answer` is the answer's text so far,
        which the cursor keeps (an answer it does not continue starts it again)."""
        if not answer.startswith(self.text):
            self.state.close()
            self.state, self.text = GrammarConstraint(self.vocab, self.vocab_size, self.grammar), ""
        if not self._feed(self.state, answer[len(self.text):]):
            raise ApiError("the answer so far does not hold its format's grammar", 500)
        self.text = answer
        fork = self.state.clone()
        if draft and not self._feed(fork, draft):
            fork.close()
            return None
        return fork

    def _feed(self, state: GrammarConstraint, text: str) -> bool:
        for token in self.tokenize(text.encode("utf-8", errors="surrogatepass"), False) if text else ():
            if not state.allows(token):
                return False
            state.accept(token)
        return True

    def close(self) -> None:
        self.state.close()


class GrammarConstraint:
    """One answer's grammar state on one model's vocabulary; used by that model's worker thread only."""

    sampler = None  # until llama.cpp has made one

    def __init__(self, vocab: Any, vocab_size: int, grammar: str | None, sampler: Any = None):
        from llama_cpp import llama_cpp

        self._llama, self.vocab, self.vocab_size = llama_cpp, vocab, vocab_size
        self.sampler = sampler or llama_cpp.llama_sampler_init_grammar(vocab, (grammar or "").encode("utf-8"), b"root")
        if not self.sampler:
            raise ApiError("invalid JSON schema in format: llama.cpp could not parse its grammar", 400)
        self.one = np.zeros(1, dtype=_TOKEN_DATA)

    @functools.cached_property
    def candidates(self) -> np.ndarray:
        """Every token, for the full pass (`choose`): made only when it runs, not per fork."""
        candidates = np.zeros(self.vocab_size, dtype=_TOKEN_DATA)
        candidates["id"] = np.arange(self.vocab_size, dtype=np.int32)
        return candidates

    def clone(self) -> GrammarConstraint:
        """Another constraint in this one's state, which each then changes on its own."""
        return GrammarConstraint(self.vocab, self.vocab_size, None, self._llama.llama_sampler_clone(self.sampler))

    def _apply(self, data: np.ndarray) -> None:
        array = self._llama.llama_token_data_array(
            data=data.ctypes.data_as(self._llama.llama_token_data_p), size=data.shape[0], selected=-1, sorted=False)
        self._llama.llama_sampler_apply(self.sampler, ctypes.byref(array))

    def allows(self, token: int) -> bool:
        self.one[0] = (token, 0.0, 0.0)
        self._apply(self.one)
        return bool(np.isfinite(self.one["logit"][0]))

    def choose(self, logits: np.ndarray, options: SamplingOptions, rng: np.random.Generator | None) -> int:
        """The token sampling picks among those the grammar allows next. `rng` is None for a greedy job
        (runner.py makes none for it), which draws nothing."""
        token = _sample(logits, options, rng)
        if self.allows(token):
            return token
        self.candidates["logit"] = logits
        self._apply(self.candidates)
        masked = self.candidates["logit"].copy()
        if not np.isfinite(masked).any():
            raise RuntimeError("the grammar allows no token here")
        return _sample(masked, options, rng)

    def accept(self, token: int) -> None:
        self._llama.llama_sampler_accept(self.sampler, token)

    def close(self) -> None:
        if self.sampler:
            self._llama.llama_sampler_free(self.sampler)
            self.sampler = None

    __del__ = close  # a job that never reached a group (its prompt failed to tokenize) frees it here


def _sample(logits: np.ndarray, options: SamplingOptions, rng: np.random.Generator | None) -> int:
    """utils/sampling.py's draw; without a generator (a greedy job) the most likely token, as it picks."""
    return int(np.argmax(logits)) if rng is None else sample(logits, options, rng)
