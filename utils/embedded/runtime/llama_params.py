"""What the runner needs from llama-cpp-python beyond Llama()'s own arguments: parameter fields it
has no argument for, the batch-invariant kernel switch, and a token's whole bytes."""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# llama.cpp before numpy: see runner.py.
from llama_cpp import llama_cpp


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
    """Which of llama.cpp's CPU kernels compute a batch, chosen per llama_decode.

    llama.cpp computes a batch of rows with other kernels than a row alone: the tiled K-quant
    kernels from 8 rows, and with repacked weights a 4-row gemm. A verified token could then differ
    from the standard one at a near tie. scripts/install.sh builds llama.cpp with a patch that adds
    a switch, batch invariance (scripts/patches/README.md): while it is on, every row is computed as
    it would be alone. The runner turns it on for the decodes whose logits it reads (a token, a
    validator burst), so those rows equal a lone token's bit for bit, whatever K, and off for a
    prompt's other tokens, which the tiled kernels then read fast from 8 rows (fewer go row by row
    anyway, so the few tokens a split burst evaluates without logits are computed as alone).

    Weights stay unrepacked unless `fast_batches`. Repacked, a prompt's rows are computed four at a
    time and the rows left over one by one, so a token's KV entry depended on where its prompt
    stretch began, that is on what the cache held: on the multi-turn benchmark 78-89% of greedy
    speculative answers equalled the standard ones, and 86% of standard answers their own repeat
    (docs/performance.md, "Plain decoding"). Computing prompts row by row as well reads them a
    third as fast. `fast_batches`: repacked weights, upstream's kernels everywhere, not exact. A
    llama.cpp without the patch (installed some other way) computes rows exactly in batches of up
    to 7 only (the tiled kernels), which `exact_rows` keeps.
    """

    def __init__(self, fast_batches: bool):
        self.fast_batches = fast_batches
        patched = _invariance_switch() is not None
        self.repacked = fast_batches  # load weights repacked
        self.exact_rows = None if patched or fast_batches else 7  # None: no limit

    def invariant(self, on: bool) -> None:
        """Compute the next decode's rows as each would be alone (on), or as fast as possible."""
        set_batch_invariance(on and not self.fast_batches)


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
