"""What the runner needs from llama-cpp-python beyond Llama()'s own arguments: parameter fields it
has no argument for, and a token's whole bytes."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager

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
