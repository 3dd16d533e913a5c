"""llama.cpp behind the embedded server: one worker thread per loaded model.

Each model keeps a few KV-cache sequences (slots, Ollama's OLLAMA_NUM_PARALLEL). A request goes to
the idle slot whose cached text it continues, else to the one used longest ago; answers in progress
in several slots advance a token each in turn (in one llama_decode), so a second client's first
token waits for its own prompt, not for the first client's whole answer. The one trick is for the
prompt-prefix validator: requests that arrive together with `num_predict` 1 and
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
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

# On a CUDA build, loading llama.cpp's libraries after numpy's made every model load segfault (seen
# on an H100 machine image); the server process imports this module before anything imports numpy
# (server.serve), and this line keeps llama.cpp first here too.
from llama_cpp import Llama, llama_cpp

# isort: split
import numpy as np

from utils.embedded.runtime.batch import Batch
from utils.embedded.runtime.bursts import gather
from utils.embedded.runtime.cache import TokenCache, common_prefix
from utils.embedded.runtime.jobs import Completion, Job, RunnerError, token_info
from utils.embedded.runtime.llama_params import Kernels, llama_defaults, token_piece, tokenizer
from utils.embedded.runtime.slots import Answer, Slot, idle_slot, nested_groups, tokenize_group
from utils.embedded.runtime.truncation import Abandoned, fit_groups, log_prompt
from utils.sampling import sample

TRACE = os.environ.get("SPEC_EMBEDDED_TRACE") == "1"  # print how each burst was grouped (stderr)

class ModelRunner:
    """A loaded model, its KV cache and the thread that owns both."""

    def __init__(self, name: str, path: Path, num_ctx: int, threads: int, batch: bool = True,
                 fast_batches: bool = False, gpu_layers: int = -1, parallel: int = 4):
        self.name, self.path, self.num_ctx = name, path, num_ctx
        self.parameters: dict[str, object] = {}  # the name's Modelfile parameters (LoadedModels sets them)
        # Its Modelfile TEMPLATE (Go) and SYSTEM (LoadedModels sets them); None: the GGUF's own template.
        self.template: str | None = None
        self.system = ""
        # With a GPU backend (a CUDA or Metal build) the layers live on the GPU: -1 means all of them.
        # On a CPU-only build llama.cpp ignores the setting; it is set to 0 so that /api/ps says so.
        self.gpu_layers = gpu_layers if llama_cpp.llama_supports_gpu_offload() else 0
        self.batch = batch  # False: one request at a time, like Ollama with OLLAMA_NUM_PARALLEL=1
        parallel = max(1, min(parallel, llama_cpp.llama_max_parallel_sequences())) if batch else 1
        # Every row computed as it would be alone (Kernels; no llamafile kernels either, see
        # scripts/llama_flags.sh): a verified token is the standard one bit for bit. Each slot's
        # sequence gets a whole `num_ctx` (kv_unified off).
        self.kernels = Kernels(fast_batches)
        with llama_defaults("llama_model_default_params", use_extra_bufts=self.kernels.repacked), \
                llama_defaults("llama_context_default_params", n_seq_max=parallel, kv_unified=False):
            self.llama = Llama(
                model_path=str(path), n_ctx=num_ctx * parallel, n_batch=512, n_threads=threads,
                n_threads_batch=threads, logits_all=False, verbose=False, n_gpu_layers=self.gpu_layers,
            )
        model = self.llama._model
        self.vocab_size = self.llama.n_vocab()
        vocab = llama_cpp.llama_model_get_vocab(model.model)
        self.pieces = [token_piece(vocab, t) for t in range(self.vocab_size)]
        self.end_tokens = {t for t in range(self.vocab_size) if llama_cpp.llama_vocab_is_eog(vocab, t)}
        tokenize = tokenizer(vocab)
        adds_bos, bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab)), int(llama_cpp.llama_vocab_bos(vocab))
        self.slots = [Slot(seq, TokenCache(self.pieces, tokenize, adds_bos, bos)) for seq in range(parallel)]
        self.pending: deque[list[Job]] = deque()  # groups waiting for an idle slot
        self.uses = 0
        # Rows whose logits are read go in batches of at most this many: any number with the patched
        # llama.cpp, 7 without it (Kernels).
        self.exact_rows = self.kernels.exact_rows or self.llama.n_batch
        self.expected_burst = 1  # jobs in the last burst of one-token requests
        self.llama_batch = Batch(self.llama, self.kernels, self.vocab_size)
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.thread = threading.Thread(target=self._serve, name=f"model {name}", daemon=True)
        self.thread.start()

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
    def answers(self) -> list[Answer]:
        """The answers in progress, one per busy slot."""
        return [slot.answer for slot in self.slots if slot.answer is not None]

    @property
    def answering(self) -> bool:
        """An answer is in progress or a request waits for the worker."""
        return bool(self.answers or self.pending) or not self.jobs.empty()

    def count_tokens(self, text: str) -> int:
        """The tokens of a prompt (with its beginning-of-sequence token). llama.cpp's tokenizer reads
        only the vocabulary, so this is safe beside the worker."""
        return len(self.llama.tokenize(text.encode("utf-8", errors="surrogatepass"), add_bos=True, special=True))

    def submit(self, job: Job) -> None:
        job.submitted = time.perf_counter_ns()
        self.jobs.put(job)

    def submit_all(self, jobs: list[Job]) -> None:
        """Jobs queued at once, waking the worker once: the requests of one validator burst, made in
        this process (utils/embedded/http/target.py). Put one by one, the first would wake the worker
        to gather the rest while they are still being put, the two threads passing the GIL back and
        forth for each."""
        now = time.perf_counter_ns()
        for job in jobs:
            job.submitted = now
        with self.jobs.mutex:  # queue.Queue's own lock and condition, as its put() uses them
            self.jobs.queue.extend(jobs)
            self.jobs.unfinished_tasks += len(jobs)
            self.jobs.not_empty.notify()

    def close(self) -> None:
        """Stop the answers in progress, let the worker finish, then free the model (never before)."""
        for answer in self.answers:
            answer.job.cancelled.set()
        self.jobs.put(None)
        self.thread.join()
        self.llama.close()

    # -- the worker ------------------------------------------------------------------------------

    def _serve(self) -> None:
        """Take requests, start them in idle slots, and advance every answer in progress a token,
        in turn, so that a request never waits for another's whole answer."""
        while True:
            try:  # while answers are in progress or requests wait for a slot, only what is already here
                job = self.jobs.get_nowait() if self.answers or self.pending else self.jobs.get()
            except queue.Empty:
                pass  # nothing new: the answers in progress go on
            else:
                if job is None:  # close(): the answers in progress were cancelled; what waits is served
                    while self.pending or self.answers:
                        self._start_pending()
                        self._step()
                    return
                self._take(job)
            self._start_pending()
            self._step()

    def _take(self, job: Job) -> None:
        """Gather the burst `job` begins and queue its groups."""
        taken = time.perf_counter_ns()
        burst = [job]
        if job.num_predict == 1 and self.batch:
            self.expected_burst = gather(self.jobs, burst, self.expected_burst)
        groups = nested_groups(burst)
        self.pending.extend(groups)
        if TRACE:
            print(f"[{self.name}] {len(burst)} jobs, {len(groups)} groups: waited {(taken - job.submitted) / 1e6:.2f} "
                  f"ms in the queue, {(time.perf_counter_ns() - taken) / 1e6:.2f} ms for the burst", file=sys.stderr)

    def _start_pending(self) -> None:
        """Start the waiting groups, first come first served, while a slot is idle. Abandoned answers
        end first: their slot holds what the next request (a burst after a closed segment) continues."""
        self._end_abandoned()
        while self.pending and (slot := idle_slot(self.slots, self.pending[0][0].prompt)) is not None:
            group = self.pending.popleft()
            self.uses += 1
            slot.used = self.uses
            for part in fit_groups(tokenize_group(slot, group), self.num_ctx):
                self._run_group(slot, part)

    def _run_group(self, slot: Slot, group: list[Job]) -> None:
        try:
            self._run_jobs(slot, group)
        finally:
            for job in group:
                if job.constraint is not None and not (slot.answer and slot.answer.job is job):
                    job.constraint.close()

    def _run_jobs(self, slot: Slot, group: list[Job]) -> None:
        """Evaluate a group's prompts and answer each from its row; the answers in progress in other
        slots ride along in the group's last decode where they fit (`_riders`), a token each."""
        riders, rode = [], np.empty((0, self.vocab_size), dtype=np.float32)
        try:
            longest = group[-1].tokens
            if not group[0].tokens:
                raise RunnerError("the prompt is empty", 400)
            if len(longest) >= self.num_ctx:
                raise RunnerError(
                    f"the input length ({len(longest)} tokens) exceeds the context length "
                    f"({self.num_ctx} tokens)", 400
                )
            started = time.perf_counter_ns()
            first = len(group[0].tokens) - 1
            hint = group[0].reuse if group[0].version == slot.cache.version else 0
            riders = self._riders(len(longest) - first)
            gone = lambda: all(job.cancelled.is_set() for job in group)  # noqa: E731 - read between batches
            rows = self._evaluate(slot, longest, first_row=first, hint=hint, copy=False, riders=riders, gone=gone)
            rows, rode = rows[: len(longest) - first], rows[len(longest) - first :]
            slot.cache.settle(group[0].walked)
            prompt_ns = time.perf_counter_ns() - started
            if all(job.num_predict == 1 and job.options.greedy and job.constraint is None for job in group):
                self._answer_greedy_steps(slot, group, rows, first, prompt_ns)
            else:
                for job in group:
                    self._begin(slot, job, rows[len(job.tokens) - 1 - first], prompt_ns)
        except RunnerError as error:
            for job in group:
                job.on_done(error)
        except Abandoned:  # its clients have left: what they are told is never read
            for job in group:
                job.on_done(Completion("cancelled", len(job.tokens), 0, 0, 0))
        except Exception as error:  # noqa: BLE001 - a crash here must not kill the worker
            for job in group:
                job.on_done(RunnerError(f"llama.cpp failed: {error}", 500))
        if len(rode):  # their tokens were evaluated: they are advanced whatever became of the group
            self._advance_all(riders, rode)

    def _riders(self, count: int) -> list[Answer]:
        """The answers in progress, if their next tokens fit beside `count` rows of another slot in
        one decode of at most `exact_rows` (each row computed as it is alone): a validator burst, or
        a new prompt's last token, then costs the others no decode of their own."""
        riders = [answer for answer in self.answers if not answer.job.cancelled.is_set()]
        return riders if count + len(riders) <= self.exact_rows else []

    def _evaluate(self, slot: Slot, tokens: Sequence[int], first_row: int, hint: int = 0, copy: bool = True,
                  riders: list[Answer] | None = None, gone: Callable[[], bool] | None = None) -> np.ndarray:
        """Bring the slot's sequence to `tokens` and return the logits of positions first_row..end.

        The tokens before first_row that are not cached yet are evaluated first (their logits are
        not needed), then the rows first_row..end in one llama_decode (a validator burst: the
        context's last token and the K drafts together), or in several of at most `exact_rows`.
        `hint`: leading tokens known to equal the cache. Without `copy` the rows may be a view of
        llama.cpp's buffer, valid until the next decode. `riders` (`_riders`) go into the last decode,
        their rows after the slot's. `gone`: whether the clients have left, asked between batches of
        the prompt (Abandoned), as Ollama's runner stops at its next batch.
        """
        cache = slot.cache
        keep = common_prefix(cache.tokens, tokens, first_row, hint)
        if keep < len(cache.tokens):
            self.llama._ctx.kv_cache_seq_rm(slot.seq, keep, -1)
        cache.truncate(keep)
        log_prompt(len(tokens), keep)
        if keep < first_row:
            self._decode(slot, tokens[keep:first_row], rows=False, gone=gone)
        if riders:
            return self._decode_with(slot, tokens[first_row:], riders, copy)
        return self._decode(slot, tokens[first_row:], rows=True, copy=copy)

    def _run_rows(self, parts: list[tuple[Slot, Sequence[int]]], rows: bool) -> np.ndarray:
        """One llama_decode of each slot's tokens after its cached ones, which its cache then holds;
        with `rows`, the logits of every row in order (a view of llama.cpp's buffer, valid until the
        next decode)."""
        tokens: list[int] = []
        positions: list[int] = []
        seqs: list[int] = []
        for slot, more in parts:
            past = len(slot.cache.tokens)
            tokens += more
            positions += range(past, past + len(more))
            seqs += [slot.seq] * len(more)
        block = self.llama_batch.run(tokens, positions, seqs, rows)
        for slot, more in parts:
            slot.cache.extend(more)
        return block

    def _decode_with(self, slot: Slot, tokens: Sequence[int], riders: list[Answer], copy: bool) -> np.ndarray:
        """`tokens` after the slot's cache and each rider's next token after its own, in one decode:
        the logits of every row, the slot's first."""
        block = self._run_rows([(slot, tokens), *((answer.slot, [answer.next]) for answer in riders)], rows=True)
        return block.copy() if copy else block

    def _decode(self, slot: Slot, tokens: Sequence[int], rows: bool, copy: bool = True,
                gone: Callable[[], bool] | None = None) -> np.ndarray:
        """Evaluate `tokens` after the slot's cache; with `rows`, return the logits of each (else of none)."""
        size = self.exact_rows if rows else self.llama.n_batch
        outputs = []
        for start in range(0, len(tokens), size):
            if gone is not None and gone():  # what was read stays cached for the next request
                raise Abandoned(start, len(tokens))
            chunk_rows = self._run_rows([(slot, tokens[start : start + size])], rows)
            if rows:
                last = start + size >= len(tokens)  # the next decode would overwrite a view
                outputs.append(chunk_rows if last else chunk_rows.copy())
        if not outputs:
            return np.empty((0, self.vocab_size), dtype=np.float32)
        if len(outputs) == 1:
            return outputs[0].copy() if copy else outputs[0]
        return np.concatenate(outputs)

    def _decode_across(self, items: list[tuple[Slot, int]]) -> np.ndarray:
        """Evaluate one token after each of several slots' caches, in one llama_decode (in batches of
        at most `exact_rows`: each row is then computed as it is alone); the logits of each."""
        if len(items) == 1:
            return self._decode(items[0][0], [items[0][1]], rows=True, copy=False)
        chunks = [items[start : start + self.exact_rows] for start in range(0, len(items), self.exact_rows)]
        return np.concatenate([self._run_rows([(slot, [token]) for slot, token in chunk], rows=True).copy()
                               for chunk in chunks])

    # -- generation -------------------------------------------------------------------------------

    def _begin(self, slot: Slot, job: Job, logits: np.ndarray, prompt_ns: int) -> None:
        """Sample the first token from `logits`; an answer that goes on stays in the slot."""
        rng = np.random.default_rng(job.options.seed) if not job.options.greedy else None
        answer = Answer(job, slot, rng, prompt_ns, time.perf_counter_ns())
        if job.cancelled.is_set():
            self._finish(answer, "cancelled")
        else:
            self._advance(answer, logits)

    def _answer_greedy_steps(self, slot: Slot, group: list[Job], rows: np.ndarray, first: int,
                             prompt_ns: int) -> None:
        """A validator's greedy group, one token each: every row's token in one argmax, and each job
        answered and ended at once (what `_begin` would do for each, with no answer left in the slot).
        Python work here is paid per burst, after a decode that has left the CPU's caches cold."""
        started = time.perf_counter_ns()
        chosen = rows.argmax(axis=1).tolist()
        for job in group:
            row, reason = len(job.tokens) - 1 - first, "cancelled"
            if not job.cancelled.is_set():
                token = chosen[row]
                slot.cache.choose(len(job.tokens), token)
                reason = "stop" if token in self.end_tokens else "length"
                if reason == "length":
                    job.on_token(token_info(self.pieces, token, rows[row], job.top_logprobs))
            job.on_done(Completion(reason, len(job.tokens), prompt_ns, int(reason == "length"),
                                   time.perf_counter_ns() - started))

    def _step(self) -> None:
        """One token for every answer in progress: their pending tokens evaluated in one llama_decode
        (each in its own sequence), then each answer's next token sampled from its row."""
        self._end_abandoned()
        answers = self.answers
        if not answers:
            return
        try:
            rows = self._decode_across([(answer.slot, answer.next) for answer in answers])
        except Exception as error:  # noqa: BLE001 - a crash here must not kill the worker
            self._fail(answers, error)
            return
        self._advance_all(answers, rows)

    def _advance_all(self, answers: list[Answer], rows: np.ndarray) -> None:
        """Each answer's next token from its row (the answers that a failure ended are skipped)."""
        try:
            for answer, logits in zip(answers, rows):
                self._advance(answer, logits)
        except Exception as error:  # noqa: BLE001 - a crash here must not kill the worker
            self._fail(self.answers, error)

    def _fail(self, answers: list[Answer], error: Exception) -> None:
        for answer in answers:
            self._finish(answer, "error", RunnerError(f"llama.cpp failed: {error}", 500))

    def _end_abandoned(self) -> None:
        """End the answers whose client has left: their slots become idle."""
        for answer in self.answers:
            if answer.job.cancelled.is_set():
                self._finish(answer, "cancelled")

    def _advance(self, answer: Answer, logits: np.ndarray) -> None:
        """Sample the answer's next token, give it, and keep the answer in its slot unless it ends."""
        job, slot = answer.job, answer.slot
        if job.constraint is None:  # a greedy answer has no generator (_start): it draws nothing
            token = int(np.argmax(logits)) if answer.rng is None else sample(logits, job.options, answer.rng)
        else:  # `format`: the grammar's allowed tokens only
            token = job.constraint.choose(logits, job.options, answer.rng)
            job.constraint.accept(token)
        slot.cache.choose(len(job.tokens) + answer.count, token)
        if token in self.end_tokens:
            return self._finish(answer, "stop")
        job.on_token(token_info(self.pieces, token, logits, job.top_logprobs))
        answer.count += 1
        # A full context ends an answer with done_reason "length", as Ollama's does.
        if (answer.count == job.num_predict or job.cancelled.is_set()
                or len(slot.cache.tokens) + 1 >= self.num_ctx):
            return self._finish(answer, "length")
        answer.next = token
        slot.answer = answer

    def _finish(self, answer: Answer, reason: str, error: RunnerError | None = None) -> None:
        """End the answer: its slot becomes idle, its grammar is freed, its client is told why."""
        job = answer.job
        answer.slot.answer = None
        if job.constraint is not None:
            job.constraint.close()
        job.on_done(error or Completion(reason, len(job.tokens), answer.prompt_ns, answer.count,
                                        time.perf_counter_ns() - answer.started))
