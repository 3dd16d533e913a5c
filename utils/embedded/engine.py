"""llama.cpp behind the embedded server: one worker thread per loaded model.

Each model keeps a single KV-cache sequence and serves requests one evaluation at a time. The one
trick is for the prompt-prefix validator: requests that arrive together with `num_predict` 1 and
prompts that extend one another (context, context+d1, context+d1+d2, ...) are answered from ONE
llama_decode of the longest prompt's new tokens, reading each request's next-token logits at its own
position. Prompts are tokenized against the cache (cache.py), at a cost proportional to what is new;
in a nested group each prompt is tokenized as the previous one plus its extra text.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

# On a CUDA build, loading llama.cpp's libraries after numpy's made every model load segfault (seen
# on an H100 machine image); the server process imports this module before anything imports numpy
# (server.serve), and this line keeps llama.cpp first here too.
from llama_cpp import Llama, llama_cpp

# isort: split
import numpy as np

from utils.embedded.bursts import gather
from utils.embedded.cache import TokenCache, common_prefix
from utils.embedded.context import fit_groups
from utils.embedded.jobs import Completion, EngineError, Job, TokenInfo
from utils.sampling import log_sum_exp, sample

EXACT_ROWS = 7
TRACE = os.environ.get("SPEC_EMBEDDED_TRACE") == "1"  # print how each burst was grouped (stderr)

# llama.cpp computes with OpenMP, and libgomp keeps a team of threads for each thread that calls it.
# With a team per loaded model there are more OpenMP threads than cores, and libgomp then stops
# spinning between steps: the target decoded about 15% slower once a draft model was loaded beside
# it. Every model's evaluations run on this one thread instead, so there is one team in all.
_COMPUTE = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama.cpp")


@contextmanager
def _model_defaults(**fields: object) -> Iterator[None]:
    """Set llama_model_params fields that llama-cpp-python's Llama() has no argument for.

    Llama() starts from llama_model_default_params(); for the duration, that returns the defaults
    with `fields` changed. Models load one at a time (the server's model lock), so this is safe.
    """
    import llama_cpp.llama as llama_module

    original = llama_module.llama_cpp.llama_model_default_params

    def defaults():
        params = original()
        for name, value in fields.items():
            setattr(params, name, value)
        return params

    llama_module.llama_cpp.llama_model_default_params = defaults
    try:
        yield
    finally:
        llama_module.llama_cpp.llama_model_default_params = original


def _piece(vocab: object, token: int) -> bytes:
    """A token's bytes. Special tokens keep their text (<|im_start|>): raw prompts contain them and
    Ollama shows them. (llama-cpp-python's detokenize cuts pieces over 32 bytes, such as long runs of
    spaces in code, to nothing.)"""
    import ctypes

    size = 64
    while True:
        buffer = ctypes.create_string_buffer(size)
        length = llama_cpp.llama_token_to_piece(vocab, token, buffer, size, 0, True)
        if length >= 0:
            return buffer.raw[:length]
        size = -length  # too small: the length it needs


def _best(logits: np.ndarray, count: int) -> list[int]:
    """The `count` most likely tokens, most likely first (ties: lower id first). A few argmax passes
    for a few tokens; otherwise one partition for the threshold (an argpartition of a whole
    vocabulary costs about 0.25 ms per 50,000 tokens)."""
    if count <= 8:
        values, best = logits.copy(), []
        for _ in range(min(count, values.shape[0])):
            token = int(np.argmax(values))
            best.append(token)
            values[token] = -np.inf
        return best
    size = logits.shape[0]
    if count >= size:
        return [int(t) for t in np.argsort(-logits, kind="stable")]
    threshold = np.partition(logits, size - count)[size - count]
    candidates = np.flatnonzero(logits >= threshold)
    return [int(t) for t in candidates[np.argsort(-logits[candidates], kind="stable")][:count]]


class ModelRunner:
    """A loaded model, its KV cache and the thread that owns both."""

    def __init__(self, name: str, path: Path, num_ctx: int, threads: int, batch: bool = True,
                 fast_batches: bool = False, gpu_layers: int = -1):
        self.name, self.path, self.num_ctx = name, path, num_ctx
        # With a GPU backend (a CUDA or Metal build) the layers live on the GPU: -1 means all of them.
        # On a CPU-only build llama.cpp ignores the setting; it is set to 0 so that /api/ps says so.
        self.gpu_layers = gpu_layers if llama_cpp.llama_supports_gpu_offload() else 0
        self.batch = batch  # False: one request per evaluation, like Ollama with OLLAMA_NUM_PARALLEL=1
        # Repacked weights have faster batch kernels, but they round a row differently in a batch than
        # alone, so a verified token could differ from the standard one at a near tie. Without them
        # (and without llamafile kernels, see scripts/install.sh) every row is computed the same way.
        with _model_defaults(use_extra_bufts=fast_batches):
            self.llama = Llama(
                model_path=str(path), n_ctx=num_ctx, n_batch=512, n_threads=threads,
                n_threads_batch=threads, logits_all=False, verbose=False, n_gpu_layers=self.gpu_layers,
            )
        self.current: Job | None = None
        model = self.llama._model
        self.vocab_size = self.llama.n_vocab()
        vocab = llama_cpp.llama_model_get_vocab(model.model)
        self.pieces = [_piece(vocab, t) for t in range(self.vocab_size)]
        self.end_tokens = {t for t in range(self.vocab_size) if llama_cpp.llama_vocab_is_eog(vocab, t)}
        self.cache = TokenCache(
            self.pieces, lambda text, add_bos: self.llama.tokenize(text, add_bos=add_bos, special=True),
            adds_bos=bool(llama_cpp.llama_vocab_get_add_bos(vocab)), bos=int(llama_cpp.llama_vocab_bos(vocab)),
        )
        # With the exact kernels a row is computed alike in batches of up to 7 tokens and alone, but
        # not in batches of 8 or more (qwen2.5-coder's Q4_K_M here; `python -m pytest
        # tests/test_engine_direct.py -k rows`). Rows whose logits are read are evaluated in batches
        # of at most this many, so a validator burst up to K = 6 is one llama_decode and a greedy
        # speculative answer stays the standard one. With fast batches, nothing is exact anyway.
        self.exact_rows = EXACT_ROWS if not fast_batches else self.llama.n_batch
        self.decodes = 0  # llama_decode calls so far
        self.expected_burst = 1  # jobs in the last burst of one-token requests
        self._batch_views()
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.thread = threading.Thread(target=self._serve, name=f"model {name}", daemon=True)
        self.thread.start()

    def _batch_views(self) -> None:
        """numpy views of llama.cpp's batch arrays: filling a batch is then a few array copies."""
        batch = self.llama._batch.batch
        size = self.llama.n_batch
        self._batch_tokens = np.ctypeslib.as_array(batch.token, shape=(size,))
        self._batch_positions = np.ctypeslib.as_array(batch.pos, shape=(size,))
        self._batch_logits = np.ctypeslib.as_array(batch.logits, shape=(size,))
        np.ctypeslib.as_array(batch.n_seq_id, shape=(size,))[:] = 1
        for i in range(size):
            batch.seq_id[i][0] = 0

    @property
    def vram_bytes(self) -> int:
        """About how much of the model's weights the GPU holds (Ollama's `size_vram`)."""
        layers = llama_cpp.llama_model_n_layer(self.llama._model.model)
        on_gpu = layers if self.gpu_layers < 0 else min(self.gpu_layers, layers)
        return self.path.stat().st_size * on_gpu // max(layers, 1)

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self.llama.metadata)

    @property
    def cached(self) -> list[int]:
        """The tokens whose keys and values are in the KV cache."""
        return self.cache.tokens

    @property
    def predicted(self) -> dict[int, int]:
        """position -> the token the model chose there."""
        return {p: t for p, t in enumerate(self.cache.chosen) if t >= 0}

    def tokenize(self, text: bytes) -> list[int]:
        """The tokens a request for `text` would be evaluated with, given the cache as it is now."""
        return self.cache.tokenize(text)[0]

    def vocabulary(self) -> list[str]:
        """Token strings as the GGUF file writes them (what Ollama's verbose /api/show lists)."""
        vocab = llama_cpp.llama_model_get_vocab(self.llama._model.model)
        return [
            llama_cpp.llama_vocab_get_text(vocab, t).decode("utf-8", errors="replace")
            for t in range(self.vocab_size)
        ]

    def submit(self, job: Job) -> None:
        job.submitted = time.perf_counter_ns()
        self.jobs.put(job)

    def close(self) -> None:
        """Stop the answer in progress, let the worker finish, then free the model (never before)."""
        if self.current is not None:
            self.current.cancelled.set()
        self.jobs.put(None)
        self.thread.join()
        self.llama.close()

    # -- the worker ------------------------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            taken = time.perf_counter_ns()
            burst = [job]
            if job.num_predict == 1 and self.batch:
                self.expected_burst = gather(self.jobs, burst, self.expected_burst)
            gathered = time.perf_counter_ns()
            groups = fit_groups(self._nested_groups(burst), self.num_ctx)
            if TRACE:
                tokenized = time.perf_counter_ns()
                print(f"[{self.name}] {len(burst)} jobs in {len(groups)} groups; waited "
                      f"{(taken - job.submitted) / 1e6:.2f} ms in the queue, {(gathered - taken) / 1e6:.2f} ms "
                      f"for the burst, {(tokenized - gathered) / 1e6:.2f} ms to tokenize", file=sys.stderr, flush=True)
            for group in groups:
                self.current = group[-1]
                self._run_group(group)
                self.current = None

    def _nested_groups(self, burst: list[Job]) -> list[list[Job]]:
        """Tokenize the burst shortest first and chain prompts that extend one another."""
        groups: list[list[Job]] = []
        for job in sorted(burst, key=lambda j: len(j.prompt)):
            last = groups[-1][-1] if groups else None
            nests = (
                last is not None and job.num_predict == 1 and last.num_predict == 1
                and job.prompt.startswith(last.prompt)
            )
            try:
                if nests:
                    job.tokens = self.cache.after(last.tokens, job.prompt, len(last.prompt))
                    job.reuse, job.version, job.walked = last.reuse, last.version, last.walked
                else:
                    job.tokens, job.reuse = self.cache.tokenize(job.prompt)
                    job.version, job.walked = self.cache.version, len(job.tokens)
            except Exception as error:  # noqa: BLE001 - reported to the client, never raised here
                job.on_done(EngineError(f"could not tokenize the prompt: {error}", 400))
                continue
            if nests and len(job.tokens) > len(last.tokens):
                groups[-1].append(job)
            else:
                groups.append([job])
        return groups

    def _run_group(self, group: list[Job]) -> None:
        try:
            self._run_jobs(group)
        finally:
            for job in group:
                if job.constraint is not None:
                    job.constraint.close()

    def _run_jobs(self, group: list[Job]) -> None:
        try:
            longest = group[-1].tokens
            if not group[0].tokens:
                raise EngineError("the prompt is empty", 400)
            if len(longest) >= self.num_ctx:
                raise EngineError(
                    f"the input length ({len(longest)} tokens) exceeds the context length "
                    f"({self.num_ctx} tokens)", 400
                )
            started = time.perf_counter_ns()
            first = len(group[0].tokens) - 1
            hint = group[0].reuse if group[0].version == self.cache.version else 0
            rows = self._evaluate(longest, first_row=first, hint=hint, copy=False)
            self.cache.settle(group[0].walked)
            prompt_ns = time.perf_counter_ns() - started
            for job in group:
                self._generate(job, rows[len(job.tokens) - 1 - first], prompt_ns)
        except EngineError as error:
            for job in group:
                job.on_done(error)
        except Exception as error:  # noqa: BLE001 - a crash here must not kill the worker
            for job in group:
                job.on_done(EngineError(f"llama.cpp failed: {error}", 500))

    def _evaluate(self, tokens: list[int], first_row: int, hint: int = 0, copy: bool = True) -> np.ndarray:
        """Bring the KV cache to `tokens` and return the logits of positions first_row..end.

        The tokens before first_row that are not cached yet are evaluated first (their logits are
        not needed), then the rows first_row..end in one llama_decode (a validator burst: the
        context's last token and the K drafts together), or in several of at most `exact_rows`.
        `hint`: leading tokens known to equal the cache. Without `copy` the rows may be a view of
        llama.cpp's buffer, valid until the next decode.
        """
        keep = common_prefix(self.cache.tokens, tokens, first_row, hint)
        if keep < len(self.cache.tokens):
            self.llama._ctx.kv_cache_seq_rm(-1, keep, -1)
        self.cache.truncate(keep)
        if keep < first_row:
            self._decode(tokens[keep:first_row], rows=False)
        return self._decode(tokens[first_row:], rows=True, copy=copy)

    def _decode(self, tokens: list[int], rows: bool, copy: bool = True) -> np.ndarray:
        """Evaluate `tokens` after the cache; with `rows`, return the logits of each (else of none)."""
        ctx = self.llama._ctx
        size = self.exact_rows if rows else self.llama.n_batch
        outputs = []
        for start in range(0, len(tokens), size):
            chunk = tokens[start : start + size]
            count, past = len(chunk), len(self.cache.tokens)
            self._batch_tokens[:count] = chunk
            self._batch_positions[:count] = np.arange(past, past + count, dtype=np.int32)
            self._batch_logits[:count] = rows
            self._batch_logits[count - 1] = 1  # llama.cpp always gives the last token's logits
            self.llama._batch.batch.n_tokens = count
            _COMPUTE.submit(ctx.decode, self.llama._batch).result()
            self.decodes += 1
            self.cache.extend(chunk)
            if rows:
                flat = np.ctypeslib.as_array(ctx.get_logits(), shape=(count * self.vocab_size,))
                last = start + size >= len(tokens)  # the next decode would overwrite a view
                chunk_rows = flat.reshape(count, self.vocab_size)
                outputs.append(chunk_rows if last else chunk_rows.copy())
        if not outputs:
            return np.empty((0, self.vocab_size), dtype=np.float32)
        if len(outputs) == 1:
            return outputs[0].copy() if copy else outputs[0]
        return np.concatenate(outputs)

    # -- generation -------------------------------------------------------------------------------

    def _generate(self, job: Job, logits: np.ndarray, prompt_ns: int) -> None:
        """Sample from `logits`, then keep decoding one token at a time until a stop."""
        rng = np.random.default_rng(job.options.seed) if not job.options.greedy else None
        count, reason = 0, "length"
        started = time.perf_counter_ns()
        constraint = job.constraint
        while True:
            if job.cancelled.is_set():
                reason = "cancelled"
                break
            if constraint is None:
                token = sample(logits, job.options, rng)
            else:  # `format`: the grammar's allowed tokens only
                token = constraint.choose(logits, job.options, rng)
                constraint.accept(token)
            self.cache.choose(len(job.tokens) + count, token)
            if token in self.end_tokens:
                reason = "stop"
                break
            job.on_token(self._token_info(token, logits, job.top_logprobs))
            count += 1
            if count == job.num_predict or job.cancelled.is_set():
                break
            if len(self.cache.tokens) + 1 >= self.num_ctx:
                break  # the context is full: Ollama ends such an answer with done_reason "length"
            logits = self._decode([token], rows=True, copy=False)[-1]
        job.on_done(Completion(reason, len(job.tokens), prompt_ns, count, time.perf_counter_ns() - started))

    def _token_info(self, token: int, logits: np.ndarray, top_logprobs: int | None) -> TokenInfo:
        """The token's piece; its log-probability and the `top_logprobs` best only when asked."""
        if top_logprobs is None:
            return TokenInfo(token, self.pieces[token])
        normalizer = log_sum_exp(logits)
        top: list[tuple[int, bytes, float]] = []
        if top_logprobs > 0:
            top = [(t, self.pieces[t], float(logits[t]) - normalizer) for t in _best(logits, top_logprobs)]
        return TokenInfo(token, self.pieces[token], float(logits[token]) - normalizer, top)
