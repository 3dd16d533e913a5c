"""A model's embedding context: the loaded GGUF in llama.cpp's embedding mode (the routes are
utils/embedded/http/embeddings.py).

Each model gets a second llama.cpp context with embeddings on, loaded on first use. The vector is
what Ollama's runner reads: the sequence's pooled embedding when the model declares a pooling
type, else the last token's hidden state (a chat model such as smollm2 declares none). Each input is
evaluated alone, so a batch's vectors equal those of the inputs sent one by one.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np

from utils.api.http import ApiError
from utils.embedded.runtime.batch import COMPUTE  # one OpenMP team for every llama.cpp evaluation
from utils.embedded.runtime.llama_params import set_batch_invariance

CAUSAL_MICRO_BATCH = 512


class Embedder:
    """A model's embedding context; `compute` runs `vector` on the compute thread, one input at a time."""

    def __init__(self, name: str, path: Path, num_ctx: int, threads: int):
        from llama_cpp import Llama, llama_cpp

        self.name, self.num_ctx = name, num_ctx

        def load(micro_batch: int) -> Llama:
            return Llama(model_path=str(path), embedding=True, n_ctx=num_ctx, n_batch=num_ctx, n_ubatch=micro_batch,
                         n_threads=threads, n_threads_batch=threads, verbose=False)

        # A causal model's last-token state can be computed in micro-batches (one of the whole context
        # was many times slower here); a pooled model needs the whole input in one, so it loads again.
        self.llama = load(min(num_ctx, CAUSAL_MICRO_BATCH))
        self.pooled = self.llama.pooling_type() != llama_cpp.LLAMA_POOLING_TYPE_NONE
        if self.pooled and num_ctx > CAUSAL_MICRO_BATCH:
            self.llama.close()
            self.llama = load(num_ctx)
        self.size = self.llama.n_embd()
        self.context_length = int(self.llama.metadata.get(f"{self.llama.metadata.get('general.architecture')}"
                                                          ".context_length", num_ctx))
        vocab = llama_cpp.llama_model_get_vocab(self.llama._model.model)
        self.bos = int(llama_cpp.llama_vocab_bos(vocab))
        self.eos = int(llama_cpp.llama_vocab_eos(vocab))
        self.adds_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
        self.adds_eos = bool(llama_cpp.llama_vocab_get_add_eos(vocab))
        self.lock = threading.Lock()

    def tokenize(self, text: str) -> list[int]:
        """As Ollama's runner tokenizes an embedding input: special tokens added and parsed."""
        return self.llama.tokenize(text.encode("utf-8", errors="surrogatepass"), add_bos=True, special=True)

    def fit(self, tokens: list[int], truncate: bool) -> list[int]:
        """The tokens within the context (Ollama's rule: min(num_ctx, the model's context), less room
        for a BOS/EOS the tokenizer would add); cut at the end, or refused when `truncate` is false."""
        limit = min(self.num_ctx, self.context_length)
        if len(tokens) <= limit:
            return tokens
        if not truncate:
            raise ApiError("input exceeds maximum context length", 400)
        if tokens and tokens[0] != self.bos and self.adds_bos:
            limit -= 1
        if tokens and tokens[-1] != self.eos and self.adds_eos:
            limit -= 1
        if limit <= 0:
            raise ApiError("input after truncation exceeds maximum context length", 400)
        return tokens[:limit]

    def vector(self, tokens: list[int]) -> np.ndarray:
        from llama_cpp import llama_cpp

        with self.lock:
            ctx, batch = self.llama._ctx, self.llama._batch
            ctx.kv_cache_clear()
            batch.reset()
            batch.add_sequence(tokens, 0, True)
            # One evaluation of the whole input: upstream's batch kernels, as Ollama's, whatever the
            # last generation's decode left the switch at (llama_params.Kernels).
            set_batch_invariance(False)
            ctx.decode(batch)
            pointer = (llama_cpp.llama_get_embeddings_seq(ctx.ctx, 0) if self.pooled
                       else llama_cpp.llama_get_embeddings_ith(ctx.ctx, len(tokens) - 1))
            return np.ctypeslib.as_array(pointer, shape=(self.size,)).astype(np.float32)

    async def compute(self, tokens: list[int]) -> np.ndarray:
        """`vector` on the one thread that runs every llama.cpp evaluation (batch.py's COMPUTE)."""
        return await asyncio.wrap_future(COMPUTE.submit(self.vector, tokens))

    def close(self) -> None:
        with self.lock:
            self.llama.close()
