"""One llama_decode of a batch of rows, each row a token at a position in a sequence (a slot).

The model runner (runner.py) fills llama.cpp's own batch arrays through numpy views, so that filling
a batch is a few array copies, and hands the decode to the one compute thread every model shares.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from utils.embedded.runtime.llama_params import Kernels

# llama.cpp computes with OpenMP, and libgomp keeps a team of threads for each thread that calls it.
# With a team per loaded model there are more OpenMP threads than cores, and libgomp then stops
# spinning between steps: the target decoded about 15% slower once a draft model was loaded beside
# it. Every model's evaluations run on this one thread instead, so there is one team in all.
COMPUTE = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama.cpp")


class Batch:
    """llama.cpp's batch of one loaded model (`llama`, a llama_cpp.Llama), and its decodes."""

    def __init__(self, llama: Any, kernels: Kernels, vocab_size: int):
        self.llama, self.kernels, self.vocab_size = llama, kernels, vocab_size
        self.decodes = 0  # llama_decode calls so far
        batch, size = llama._batch.batch, llama.n_batch
        self._tokens = np.ctypeslib.as_array(batch.token, shape=(size,))
        self._positions = np.ctypeslib.as_array(batch.pos, shape=(size,))
        self._logits = np.ctypeslib.as_array(batch.logits, shape=(size,))
        np.ctypeslib.as_array(batch.n_seq_id, shape=(size,))[:] = 1
        self._seqs = [-1] * size  # the sequence id each batch row holds now
        self._set_seqs([0] * size)

    def _set_seqs(self, seqs: list[int]) -> None:
        """Put batch row i in sequence seqs[i] (a ctypes write only where it changes)."""
        seq_id = self.llama._batch.batch.seq_id
        for i, seq in enumerate(seqs):
            if self._seqs[i] != seq:
                seq_id[i][0] = seq
                self._seqs[i] = seq

    def run(self, tokens: list[int], positions: np.ndarray | list[int], seqs: list[int], rows: bool) -> np.ndarray:
        """One llama_decode of batch row i = (tokens[i] at positions[i] in sequence seqs[i]); with
        `rows`, every row's logits (a view of llama.cpp's buffer, valid until the next decode)."""
        count = len(tokens)
        self._tokens[:count] = tokens
        self._positions[:count] = positions
        self._set_seqs(seqs)
        self._logits[:count] = rows
        self._logits[count - 1] = 1  # llama.cpp always gives the last token's logits
        self.llama._batch.batch.n_tokens = count
        COMPUTE.submit(self._decode).result()
        self.decodes += 1
        if not rows:
            return np.empty((0, self.vocab_size), dtype=np.float32)
        flat = np.ctypeslib.as_array(self.llama._ctx.get_logits(), shape=(count * self.vocab_size,))
        return flat.reshape(count, self.vocab_size)

    def _decode(self) -> None:
        """On the compute thread: the batch, each row computed as it would be alone (Kernels)."""
        self.kernels.apply()
        self.llama._ctx.decode(self.llama._batch)
