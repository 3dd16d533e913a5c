"""What the runner needs from llama-cpp-python beyond Llama()'s own arguments: parameter fields it
has no argument for, the batch-invariant kernel switch, a token's whole bytes, and the tokenizer."""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# llama.cpp before numpy: see runner.py.
from llama_cpp import llama_cpp

SHORT_TEXT = 64  # bytes: texts up to this long, tokenized on their own, are remembered (tokenizer)


@contextmanager
def llama_defaults(function: str, **fields: object) -> Iterator[None]:
    """Set llama.cpp parameter fields that llama-cpp-python's Llama() has no argument for.

    Llama() starts from llama_model_default_params() and llama_context_default_params(); for the
    duration, `function` returns its defaults with `fields` changed. Models load one at a time (the
    server's model lock), so this is safe.
    """
    import llama_cpp.llama as llama_module

    original = getattr(llama_module.llama_cpp, function)

    def defaults():
        params = original()
        for name, value in fields.items():
            setattr(params, name, value)
        return params

    setattr(llama_module.llama_cpp, function, defaults)
    try:
        yield
    finally:
        setattr(llama_module.llama_cpp, function, original)


class Kernels:
    """Which of llama.cpp's CPU kernels compute a batch.

    Upstream llama.cpp computes a batch of rows with other kernels than a row alone: with repacked
    weights a 4-row gemm, with unrepacked K-quants tiled kernels from 8 rows. A verified token could
    then differ from the standard one at a near tie, and the KV entries a prompt leaves would depend
    on where its stretch began, that is on what the cache held before. scripts/install.sh builds
    llama.cpp with a patch that adds a switch, batch invariance (scripts/patches/README.md): while it
    is on, every row is computed as a token decoded alone is, with repacked (fast) weights, several
    rows at a time. The runner keeps it on for every decode, so a token's logits and KV entries are
    the same bits whatever shares its batch: bursts of any K, prompts read in stretches of any length.

    `fast_batches`: upstream's kernels everywhere, not exact (no faster on this CPU: a lone token
    takes the same kernels, and prompts are read slower). A llama.cpp without the patch (installed
    some other way) loads weights unrepacked and computes rows exactly in batches of up to 7 only,
    below the tiled kernels' 8: `exact_rows` keeps that.
    """

    def __init__(self, fast_batches: bool):
        self.fast_batches = fast_batches
        patched = _invariance_switch() is not None
        self.repacked = patched or fast_batches  # load weights repacked
        self.exact_rows = None if patched or fast_batches else 7  # None: no limit

    def apply(self) -> None:
        """Before each llama_decode, on the compute thread: the switch is process-wide, and the
        embedder turns it off for its own decodes."""
        set_batch_invariance(not self.fast_batches)


def set_batch_invariance(on: bool) -> None:
    """The patch's process-wide switch (no-op without the patch); call it on the compute thread,
    before a llama_decode."""
    switch = _invariance_switch()
    if switch is not None:
        switch(1 if on else 0)


@functools.cache
def _invariance_switch():
    """The patch's ggml_cpu_set_batch_invariant in the ggml-cpu library llama.cpp has loaded, or None
    where that library lacks it. (A wheel holds libggml-cpu.so, .so.0 and .so.0.x as three copies,
    each with its own setting: only the one loaded already counts, hence RTLD_NOLOAD.)"""
    for library in sorted((Path(llama_cpp.__file__).parent / "lib").glob("*ggml-cpu*")):
        try:
            switch = ctypes.CDLL(str(library), mode=os.RTLD_NOLOAD).ggml_cpu_set_batch_invariant
        except (OSError, AttributeError):
            continue
        switch.argtypes, switch.restype = [ctypes.c_int], None
        return switch
    return None


def token_piece(vocab: object, token: int) -> bytes:
    """A token's bytes. Special tokens keep their text (<|im_start|>): raw prompts contain them and
    Ollama shows them. (llama-cpp-python's detokenize cuts pieces over 32 bytes, such as long runs of
    spaces in code, to nothing.)"""
    size = 64
    while True:
        buffer = ctypes.create_string_buffer(size)
        length = llama_cpp.llama_token_to_piece(vocab, token, buffer, size, 0, True)
        if length >= 0:
            return buffer.raw[:length]
        size = -length  # too small: the length it needs


def tokenizer(vocab: object):  # noqa: ANN202 - (text, add_bos) -> token ids
    """llama.cpp's tokenizer, as `Llama.tokenize(text, add_bos, special=True)`, into a buffer the
    size of the text (a token takes one byte at least) rather than one of the model's training
    context (32,768 ids for Qwen, allocated per call); and short texts tokenized on their own are
    remembered, as BPE tokenizers keep a cache of words: in a validator burst each nested prompt's
    new text is one drafted piece, tokenized alone (cache.py `after`), about 40 us a call in
    llama.cpp, mostly its pre-tokenizing regular expressions."""

    def raw(text: bytes, add_bos: bool) -> list[int]:
        size = len(text) + 2
        buffer = (llama_cpp.llama_token * size)()
        count = llama_cpp.llama_tokenize(vocab, text, len(text), buffer, size, add_bos, True)
        if count < 0:  # cannot happen (see above); llama.cpp says how many it needs
            buffer = (llama_cpp.llama_token * -count)()
            count = llama_cpp.llama_tokenize(vocab, text, len(text), buffer, -count, add_bos, True)
        if count < 0:
            raise RuntimeError(f"llama.cpp could not tokenize {len(text)} bytes")
        return buffer[:count]

    @functools.lru_cache(maxsize=1 << 14)
    def alone(text: bytes) -> tuple[int, ...]:
        return tuple(raw(text, False))

    def tokenize(text: bytes, add_bos: bool) -> list[int]:
        return list(alone(text)) if not add_bos and len(text) <= SHORT_TEXT else raw(text, add_bos)

    return tokenize
