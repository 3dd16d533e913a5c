"""What a model's GGUF file says of it, read without loading the model: llama.cpp's vocabulary-only
load (the file's metadata and vocabulary; no weights, no context, nothing on the model's worker).

`/api/show` answers from it, as Ollama reads its model files, so that asking about a model never
loads, reloads or keeps one (a reload would wait for, and delay, the answers in flight: loaded.py).
The metadata are the strings llama.cpp gives a loaded model (`Llama.metadata`): array values are left
out, numbers written as llama.cpp writes them.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import struct
import weakref
from pathlib import Path

# llama.cpp before numpy: see runner.py.
from llama_cpp import llama_cpp

from utils.embedded.runtime.llama_params import token_piece

_VALUE_BYTES = 1 << 20  # a metadata value's longest text (chat templates run to tens of kilobytes)


class ModelFile:
    """One GGUF file's metadata, fill-in-the-middle tokens and vocabulary."""

    def __init__(self, path: Path):
        self.path = path
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self._model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not self._model:
            raise ValueError(f"llama.cpp could not read {path}")
        weakref.finalize(self, llama_cpp.llama_model_free, self._model)
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.vocab_size = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self.metadata = self._metadata()
        self.fim = self._fim()

    def _metadata(self) -> dict[str, str]:
        buffer = ctypes.create_string_buffer(_VALUE_BYTES)
        found: dict[str, str] = {}
        for index in range(llama_cpp.llama_model_meta_count(self._model)):
            llama_cpp.llama_model_meta_key_by_index(self._model, index, buffer, _VALUE_BYTES)
            key = buffer.value.decode("utf-8", errors="replace")
            llama_cpp.llama_model_meta_val_str_by_index(self._model, index, buffer, _VALUE_BYTES)
            found[key] = buffer.value.decode("utf-8", errors="replace")
        return found

    def _fim(self) -> tuple[str, str, str] | None:
        """The text of the model's prefix, suffix and middle tokens, or None when it has none."""
        tokens = (llama_cpp.llama_vocab_fim_pre(self._vocab), llama_cpp.llama_vocab_fim_suf(self._vocab),
                  llama_cpp.llama_vocab_fim_mid(self._vocab))
        if any(token < 0 or token >= self.vocab_size for token in tokens):
            return None
        prefix, suffix, middle = (token_piece(self._vocab, token).decode("utf-8", errors="replace")
                                  for token in tokens)
        return prefix, suffix, middle

    @functools.cached_property
    def merges(self) -> list[str]:
        """A BPE tokenizer's merges as the file writes them (verbose /api/show lists them, as Ollama's
        does; llama.cpp gives no array to read them by): [] for a tokenizer without them."""
        return _string_array(self.path, "tokenizer.ggml.merges")

    @functools.cached_property
    def vocabulary(self) -> list[str]:
        """Token strings as the file writes them (what Ollama's verbose /api/show lists)."""
        return [llama_cpp.llama_vocab_get_text(self._vocab, token).decode("utf-8", errors="replace")
                for token in range(self.vocab_size)]


_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUF value types' bytes
_STRING, _ARRAY = 8, 9


def _string_array(path: Path, key: str) -> list[str]:
    """The array of strings stored under `key` in a GGUF file's metadata ([] if absent): the header's
    key-value pairs read in order, each value skipped by its type (GGUF v2 and later)."""
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        magic, version, _, pairs = struct.unpack_from("<4sIQQ", data, 0)
        if magic != b"GGUF" or version < 2:
            return []
        at = 24

        def string() -> bytes:
            nonlocal at
            (size,) = struct.unpack_from("<Q", data, at)
            at += 8 + size
            return data[at - size : at]

        for _ in range(pairs):
            name, (kind,) = string().decode("utf-8", errors="replace"), struct.unpack_from("<I", data, at)
            at += 4
            if kind == _STRING:
                string()
            elif kind != _ARRAY:
                at += _SIZES[kind]
            else:
                item, count = struct.unpack_from("<IQ", data, at)
                at += 12
                if item != _STRING:
                    at += _SIZES[item] * count
                elif name == key:
                    return [string().decode("utf-8", errors="replace") for _ in range(count)]
                else:
                    for _ in range(count):
                        string()
    return []


def read(path: Path) -> ModelFile:
    """The file's ModelFile, read once while the file stays the same (a re-installed file is read again)."""
    stat = path.stat()
    return _read(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _read(path: Path, size: int, modified: int) -> ModelFile:
    return ModelFile(path)
