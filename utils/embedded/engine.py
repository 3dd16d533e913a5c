"""llama.cpp behind the embedded server: one worker thread per loaded model.

Each model keeps a single KV-cache sequence and serves requests one evaluation at a time. The one
trick is for the prompt-prefix validator: requests that arrive together with `num_predict` 1 and
prompts that extend one another (context, context+d1, context+d1+d2, ...) are answered from ONE
evaluation of the longest prompt, reading each request's next-token logits at its own position.

Tokenization follows the cache: a prompt whose text starts with the text of the cached tokens keeps
those tokens and only the rest is tokenized, and in a nested group each prompt is tokenized as the
previous one plus its extra text. That is what keeps a speculative answer on the same token
sequence as a standard one; re-tokenizing generated text from scratch can split it differently.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from utils.sampling import SamplingOptions, log_sum_exp, sample

# A validator's K+1 requests reach the worker a few milliseconds apart (each is parsed on its own).
# After a one-token request, the worker waits until the requests stop coming: a quiet gap, or a cap.
BURST_GAP_SECONDS = 0.006
BURST_MAX_SECONDS = 0.040

# llama.cpp computes with OpenMP, and libgomp keeps a team of threads for each thread that calls it.
# With a team per loaded model there are more OpenMP threads than cores, and libgomp then stops
# spinning between steps: the target decoded about 15% slower once a draft model was loaded beside
# it. Every model's evaluations run on this one thread instead, so there is one team in all.
_COMPUTE = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama.cpp")


class EngineError(Exception):
    """A request the engine cannot serve; `status` is the HTTP status Ollama uses for it."""

    def __init__(self, message: str, status: int = 500):
        super().__init__(message)
        self.status = status


@dataclass
class TokenInfo:
    token: int
    piece: bytes
    logprob: float | None = None
    top: list[tuple[int, bytes, float]] | None = None


@dataclass
class Completion:
    """The end of one request: why it stopped and Ollama's counters (durations in nanoseconds)."""

    done_reason: str
    prompt_eval_count: int
    prompt_eval_duration: int
    eval_count: int
    eval_duration: int


@dataclass
class Job:
    """One generation request. `on_token` and `on_done` are called from the worker thread."""

    prompt: bytes
    options: SamplingOptions
    num_predict: int
    top_logprobs: int | None  # None: no logprobs
    on_token: Callable[[TokenInfo], None]
    on_done: Callable[[Completion | EngineError], None]
    cancelled: threading.Event = field(default_factory=threading.Event)
    tokens: list[int] = field(default_factory=list)


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


class ModelRunner:
    """A loaded model, its KV cache and the thread that owns both."""

    def __init__(self, name: str, path: Path, num_ctx: int, threads: int, batch: bool = True,
                 fast_batches: bool = False):
        from llama_cpp import Llama, llama_cpp

        self.name, self.path, self.num_ctx = name, path, num_ctx
        self.batch = batch  # False: one request per evaluation, like Ollama with OLLAMA_NUM_PARALLEL=1
        # Repacked weights have faster batch kernels, but they round a row differently in a batch than
        # alone, so a verified token could differ from the standard one at a near tie. Without them
        # (and without llamafile kernels, see scripts/install.sh) every row is computed the same way.
        with _model_defaults(use_extra_bufts=fast_batches):
            self.llama = Llama(
                model_path=str(path), n_ctx=num_ctx, n_batch=512, n_threads=threads,
                n_threads_batch=threads, logits_all=False, verbose=False,
            )
        self.current: Job | None = None
        model = self.llama._model
        self.vocab_size = self.llama.n_vocab()
        # Special tokens keep their text (<|im_start|>): raw prompts contain them and Ollama shows them.
        self.pieces = [model.detokenize([t], special=True) for t in range(self.vocab_size)]
        vocab = llama_cpp.llama_model_get_vocab(model.model)
        self.end_tokens = {t for t in range(self.vocab_size) if llama_cpp.llama_vocab_is_eog(vocab, t)}
        self.cached: list[int] = []  # tokens whose keys and values are in the KV cache
        self.predicted: dict[int, int] = {}  # position -> the token this model chose there
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.thread = threading.Thread(target=self._serve, name=f"model {name}", daemon=True)
        self.thread.start()

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self.llama.metadata)

    def vocabulary(self) -> list[str]:
        """Token strings as the GGUF file writes them (what Ollama's verbose /api/show lists)."""
        from llama_cpp import llama_cpp

        vocab = llama_cpp.llama_model_get_vocab(self.llama._model.model)
        return [
            llama_cpp.llama_vocab_get_text(vocab, t).decode("utf-8", errors="replace")
            for t in range(self.vocab_size)
        ]

    def submit(self, job: Job) -> None:
        self.jobs.put(job)

    def close(self) -> None:
        """Stop the answer in progress, let the worker finish, then free the model (never before)."""
        if self.current is not None:
            self.current.cancelled.set()
        self.jobs.put(None)
        self.thread.join()
        self.llama.close()

    # -- tokenization ---------------------------------------------------------------------------

    def tokenize(self, text: bytes, after: list[int] | None = None) -> list[int]:
        """Tokens for `text`, continuing `after` (tokens whose text is a prefix) or the cache."""
        base = after if after is not None else self._continue_cache(text)
        rest = text[sum(len(self.pieces[t]) for t in base) :] if base else text
        if not rest:
            return list(base)
        return list(base) + self.llama.tokenize(rest, add_bos=not base, special=True)

    def _continue_cache(self, text: bytes) -> list[int]:
        """The start of `text` as tokens: where a fresh tokenization agrees with the cache, and beyond
        that, the tokens this model chose itself.

        Where the model predicted the token at a position (it generated it, or answered a validator
        request there) and the text goes on with that token, the text is the model's own output and
        keeps the model's own tokens, as it would in one long generation. Anywhere else the prompt is
        tokenized as if fresh, so an answer never depends on what an earlier prompt left cached.
        """
        fresh = self.llama.tokenize(text, add_bos=True, special=True)
        tokens: list[int] = []
        offset = 0
        for position in range(len(self.cached) + 1):
            cached = self.cached[position] if position < len(self.cached) else None
            predicted = self.predicted.get(position)
            on_fresh = tokens == fresh[: len(tokens)]
            if predicted is not None and self.pieces[predicted] and text.startswith(self.pieces[predicted], offset):
                choice = predicted
            elif on_fresh and cached is not None and position < len(fresh) and cached == fresh[position]:
                choice = cached
            else:
                break
            tokens.append(choice)
            offset += len(self.pieces[choice])
            if choice != cached:
                break  # past here the cache holds another text
        return fresh if tokens == fresh[: len(tokens)] else tokens

    # -- the worker ------------------------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            burst = [job]
            cap = time.monotonic() + (BURST_MAX_SECONDS if job.num_predict == 1 and self.batch else 0.0)
            while (wait := min(BURST_GAP_SECONDS, cap - time.monotonic())) > 0:
                try:
                    more = self.jobs.get(timeout=wait)
                except queue.Empty:
                    break
                if more is None:
                    self.jobs.put(None)
                    break
                burst.append(more)
            for group in self._nested_groups(burst):
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
                job.tokens = self.tokenize(job.prompt, after=last.tokens if nests else None)
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
            longest = group[-1].tokens
            if not group[0].tokens:
                raise EngineError("the prompt is empty", 400)
            if len(longest) >= self.num_ctx:
                raise EngineError(
                    f"the input length ({len(longest)} tokens) exceeds the context length "
                    f"({self.num_ctx} tokens)", 400
                )
            started = time.perf_counter_ns()
            rows = self._evaluate(longest, first_row=len(group[0].tokens) - 1)
            prompt_ns = time.perf_counter_ns() - started
            first = len(group[0].tokens) - 1
            for job in group:
                self._generate(job, rows[len(job.tokens) - 1 - first], prompt_ns)
        except EngineError as error:
            for job in group:
                job.on_done(error)
        except Exception as error:  # noqa: BLE001 - a crash here must not kill the worker
            for job in group:
                job.on_done(EngineError(f"llama.cpp failed: {error}", 500))

    def _evaluate(self, tokens: list[int], first_row: int) -> np.ndarray:
        """Bring the KV cache to `tokens` and return the logits of positions first_row..end."""
        keep = 0
        for cached, wanted in zip(self.cached, tokens[:first_row]):
            if cached != wanted:
                break
            keep += 1
        ctx = self.llama._ctx
        ctx.kv_cache_seq_rm(-1, keep, -1)
        self.cached = tokens[:keep]
        self.predicted = {p: t for p, t in self.predicted.items() if p <= keep}
        if keep < first_row:
            self._decode(tokens[keep:first_row], with_logits=False)
        first = self._decode(tokens[first_row : first_row + 1], with_logits=True)
        if len(tokens) == first_row + 1:
            return first
        return np.concatenate([first, self._decode(tokens[first_row + 1 :], with_logits=True)])

    def _decode(self, tokens: list[int], with_logits: bool) -> np.ndarray:
        batch, ctx = self.llama._batch, self.llama._ctx
        outputs = []
        for start in range(0, len(tokens), self.llama.n_batch):
            chunk = tokens[start : start + self.llama.n_batch]
            batch.set_batch(batch=chunk, n_past=len(self.cached), logits_all=with_logits)
            _COMPUTE.submit(ctx.decode, batch).result()
            self.cached.extend(chunk)
            if with_logits:
                flat = np.ctypeslib.as_array(ctx.get_logits(), shape=(len(chunk) * self.vocab_size,))
                outputs.append(flat.reshape(len(chunk), self.vocab_size).copy())
        if not with_logits:
            return np.empty((0, self.vocab_size), dtype=np.float32)
        return np.concatenate(outputs)

    def _generate(self, job: Job, logits: np.ndarray, prompt_ns: int) -> None:
        """Sample from `logits`, then keep decoding one token at a time until a stop."""
        rng = np.random.default_rng(job.options.seed)
        count, reason = 0, "length"
        started = time.perf_counter_ns()
        while True:
            if job.cancelled.is_set():
                reason = "cancelled"
                break
            token = sample(logits, job.options, rng)
            self.predicted[len(job.tokens) + count] = token
            if token in self.end_tokens:
                reason = "stop"
                break
            job.on_token(self._token_info(token, logits, job.top_logprobs))
            count += 1
            if count == job.num_predict or job.cancelled.is_set():
                break
            if len(self.cached) + 1 >= self.num_ctx:
                break  # the context is full: Ollama ends such an answer with done_reason "length"
            logits = self._decode([token], with_logits=True)[-1]
        job.on_done(Completion(reason, len(job.tokens), prompt_ns, count, time.perf_counter_ns() - started))

    def _token_info(self, token: int, logits: np.ndarray, top_logprobs: int | None) -> TokenInfo:
        if top_logprobs is None:
            return TokenInfo(token, self.pieces[token])
        normalizer = log_sum_exp(logits)
        top: list[tuple[int, bytes, float]] = []
        if top_logprobs > 0:
            best = np.argpartition(-logits, top_logprobs - 1)[:top_logprobs]
            best = best[np.argsort(-logits[best], kind="stable")]
            top = [(int(t), self.pieces[int(t)], float(logits[t]) - normalizer) for t in best]
        return TokenInfo(token, self.pieces[token], float(logits[token]) - normalizer, top)
