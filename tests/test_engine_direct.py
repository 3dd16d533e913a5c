"""The embedded server's greedy answers equal llama.cpp's own, run directly on the same model file.

The server tokenizes against its cache, evaluates nested prompts in shared batches and samples in
numpy; none of that may change a greedy answer. The reference here is the plainest llama.cpp loop:
tokenize the prompt once, evaluate, take the argmax, repeat.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import ollama
import pytest
from llama_cpp import Llama, llama_cpp

from config import get_settings
from utils.embedded.store.models import ModelStore

MODEL = "smollm2:135m"
NUM_PREDICT = 32
PROMPTS = [
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "The three most important inventions of the twentieth century are",
    "<|im_start|>user\nWhat is the capital of Italy?<|im_end|>\n<|im_start|>assistant\n",
]


@pytest.fixture(scope="module")
def llm() -> Llama:
    path = ModelStore(get_settings().models_dir).path(MODEL)
    model = Llama(model_path=str(path), n_ctx=2048, verbose=False)
    yield model
    model.close()


def direct_greedy(llm: Llama, prompt: str, num_predict: int) -> tuple[list[int], list[int]]:
    """(prompt tokens, generated tokens) of a fresh greedy run; an end-of-generation token ends it."""
    vocab = llama_cpp.llama_model_get_vocab(llm._model.model)
    prompt_tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
    llm.reset()
    llm.eval(prompt_tokens)
    generated: list[int] = []
    while len(generated) < num_predict:
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
        token = int(np.argmax(logits))
        if llama_cpp.llama_vocab_is_eog(vocab, token):
            break
        generated.append(token)
        llm.eval([token])
    return prompt_tokens, generated


async def server_greedy(client: ollama.AsyncClient, prompt: str):
    return await client.generate(
        model=MODEL, prompt=prompt, raw=True, options={"temperature": 0, "num_predict": NUM_PREDICT}
    )


async def forget_cached_prompt(client: ollama.AsyncClient) -> None:
    """The server keeps the tokens of its last prompt when a new prompt's text starts with them; a
    request whose text shares nothing with the prompts below makes the next one tokenized afresh."""
    options = {"temperature": 0, "num_predict": 1}
    await client.generate(model=MODEL, prompt="~", raw=True, options=options)


@pytest.mark.parametrize("prompt", PROMPTS, ids=["code", "prose", "chatml"])
async def test_server_greedy_answer_equals_direct_llama_cpp(client, llm, prompt):
    prompt_tokens, generated = direct_greedy(llm, prompt, NUM_PREDICT)
    expected = llm.detokenize(generated, special=True).decode("utf-8", errors="replace")
    assert expected.strip(), "the reference answer should not be empty"

    await forget_cached_prompt(client)
    answer = await server_greedy(client, prompt)
    assert answer.prompt_eval_count == len(prompt_tokens)
    assert answer.response == expected
    assert answer.eval_count == len(generated)
    assert answer.done_reason == ("length" if len(generated) == NUM_PREDICT else "stop")


async def test_server_greedy_answer_does_not_depend_on_the_previous_prompt(client, llm):
    """Ollama tokenizes every prompt afresh. Here the earlier prompt ends in " wor"; its cached token
    must not be kept, or "ld" would be tokenized on its own: " wor"+"ld" instead of " world"."""
    prompt = "The quick brown fox jumps over the lazy dog. Hello world"
    prompt_tokens, generated = direct_greedy(llm, prompt, NUM_PREDICT)
    await forget_cached_prompt(client)
    await server_greedy(client, prompt[:-2])
    answer = await server_greedy(client, prompt)
    assert answer.prompt_eval_count == len(prompt_tokens)
    assert answer.response == llm.detokenize(generated, special=True).decode("utf-8", errors="replace")


@contextmanager
def direct_runner(model: str, **options: object) -> Iterator[object]:
    """The embedded server's model runner for `model`, with no server around it; closed afterwards."""
    from utils.embedded.runtime.runner import ModelRunner

    runner = ModelRunner(model, ModelStore(get_settings().models_dir).path(model), 1024, threads=2, **options)
    try:
        yield runner
    finally:
        runner.close()


BATCHES = [*range(2, 9), 16, 24]  # every size a burst takes, and prompt stretches of several row groups


def batch_differences(model: str, fast_batches: bool) -> dict[int, float]:
    """By batch size n: the largest logit difference between the last n rows of a prompt evaluated in
    one llama_decode and the same rows evaluated one at a time."""
    with direct_runner(model, fast_batches=fast_batches) as runner:
        assert runner.kernels.repacked  # the fast weights, exact or not
        tokens = runner.llama.tokenize(PROMPTS[2].encode() + b"The capital of Italy is Rome, a city", special=True)
        slot, first = runner.slots[0], len(tokens) - max(BATCHES)
        single = np.concatenate([runner._evaluate(slot, tokens[: n + 1], first_row=n)
                                 for n in range(first, len(tokens))])
        runner.exact_rows = max(BATCHES)  # one llama_decode for each batch below, whatever the kernels
        return {n: float(np.abs(runner._evaluate(slot, tokens, first_row=len(tokens) - n) - single[-n:]).max())
                for n in BATCHES}


@pytest.mark.parametrize("model", ["smollm2:135m", "qwen2.5-coder:0.5b", "qwen2.5-coder:1.5b"])
def test_rows_are_computed_the_same_in_a_batch_and_alone(model):
    """Why greedy speculation can be exact: with the engine's build and default settings (repacked
    weights) a row's logits do not depend on how many rows share its batch."""
    from utils.embedded.runtime.llama_params import _invariance_switch

    assert _invariance_switch() is not None, "this llama.cpp lacks the batch-invariance patch (scripts/install.sh)"
    differences = batch_differences(model, fast_batches=False)
    print(f"{model}: largest logit difference, batch of n against alone: {differences}")
    assert differences == {n: 0.0 for n in BATCHES}


def test_upstream_batch_kernels_are_not_exact():
    """The check can tell the kernels apart: with SPEC_FAST_BATCHES (upstream's kernels) a row in a
    batch of 4 or more differs from the same row alone."""
    differences = batch_differences("qwen2.5-coder:0.5b", fast_batches=True)
    print(f"qwen2.5-coder:0.5b with fast batches: {differences}")
    assert differences[2] == differences[3] == 0.0  # fewer than 4 rows go one by one upstream too
    assert all(differences[n] > 0.0 for n in BATCHES if n >= 4)


def logits_after_cached_prefixes(model: str, fast_batches: bool, cached: list[int]) -> list[np.ndarray]:
    """The last token's logits of one prompt, read after the cache held its first k tokens, for each k
    in `cached`: the rest of the prompt is then read in one stretch that begins at k."""
    with direct_runner(model, fast_batches=fast_batches) as runner:
        tokens = runner.llama.tokenize(PROMPTS[1].encode() + PROMPTS[2].encode(), special=True)
        slot, out = runner.slots[0], []
        for k in cached:
            runner._evaluate(slot, tokens[:k], first_row=k - 1)
            out.append(runner._evaluate(slot, tokens, first_row=len(tokens) - 1))
        return out


CACHED = [1, 6, 13, 27]


def test_a_prompt_is_read_the_same_whatever_the_cache_held():
    """Why conversations stay exact: the KV entries a prompt leaves do not depend on where the stretch
    that read it began (in a conversation: on what the cache held from the turn before)."""
    first, *others = logits_after_cached_prefixes("qwen2.5-coder:1.5b", False, CACHED)
    assert all(np.array_equal(first, other) for other in others)


def test_upstream_kernels_read_a_prompt_differently_by_where_it_began():
    """The check can tell: upstream's 4-row gemm leaves other KV entries when a stretch begins elsewhere."""
    first, *others = logits_after_cached_prefixes("qwen2.5-coder:1.5b", True, CACHED)
    assert any(not np.array_equal(first, other) for other in others)


def run_jobs(runner, prompts: list[bytes], num_predict: int, together: bool) -> list[tuple[list[int], object]]:
    """Submit greedy jobs (all at once while they count as arriving, or one after another) and wait
    for them: (tokens made, completion) of each."""
    import threading

    from utils.embedded.runtime.jobs import ARRIVALS, Job
    from utils.sampling import SamplingOptions

    results = []

    def job(prompt: bytes):
        made, done, finished = [], [], threading.Event()
        results.append((made, done))
        return Job(prompt, SamplingOptions(temperature=0.0), num_predict, None,
                   on_token=lambda info: made.append(info.token),
                   on_done=lambda event: (done.append(event), finished.set())), finished

    jobs = [job(prompt) for prompt in prompts]
    if together:
        for _ in jobs:
            ARRIVALS.arrive()  # what the HTTP layer does as requests come in
        for each, _ in jobs:
            runner.submit(each)
            ARRIVALS.settle()
        for _, finished in jobs:
            assert finished.wait(60)
    else:
        for each, finished in jobs:
            runner.submit(each)
            assert finished.wait(60)
    return [(made, done[0]) for made, done in results]


@pytest.mark.parametrize("k", [4, 6])
def test_a_validator_burst_is_one_llama_decode(k):
    """K+1 nested one-token prompts (context, context+d1, ...) are answered from ONE llama_decode,
    each exactly as it is answered alone."""
    with direct_runner(MODEL) as runner:
        context = PROMPTS[0].encode()
        [(drafts, _)] = run_jobs(runner, [context], k, together=False)
        pieces = [runner.pieces[t] for t in drafts]
        prompts = [context + b"".join(pieces[:i]) for i in range(k + 1)]
        run_jobs(runner, [context], 1, together=False)  # the cache holds the context again
        before = runner.llama_batch.decodes
        together = run_jobs(runner, prompts, 1, together=True)
        assert runner.llama_batch.decodes - before == 1
        assert [made for made, _ in together[:-1]] == [[t] for t in drafts]  # greedy follows its own path
        counts = [done.prompt_eval_count for _, done in together]
        assert counts == list(range(counts[0], counts[0] + k + 1))
        alone = run_jobs(runner, prompts, 1, together=False)
        assert [made for made, _ in together] == [made for made, _ in alone]
        assert counts == [done.prompt_eval_count for _, done in alone]


def test_answers_in_progress_advance_together_each_as_it_would_alone():
    """Concurrent answers share the worker: each has its own KV-cache sequence, and their next tokens
    are evaluated in one llama_decode. Each greedy answer is still exactly the one it gets alone,
    and the worker needed fewer decodes than running them one after another."""
    with direct_runner(MODEL, parallel=3) as runner:
        prompts = [prompt.encode() for prompt in PROMPTS]
        before = runner.llama_batch.decodes
        alone = [run_jobs(runner, [prompt], NUM_PREDICT, together=False)[0] for prompt in prompts]
        one_by_one = runner.llama_batch.decodes - before
        run_jobs(runner, [b"~"] * 3, 1, together=False)  # evaluate the prompts again below
        before = runner.llama_batch.decodes
        together = run_jobs(runner, prompts, NUM_PREDICT, together=True)
        assert [made for made, _ in together] == [made for made, _ in alone]
        assert sorted(len(made) for made, _ in together)[-2] == NUM_PREDICT  # two long answers at least
        assert runner.llama_batch.decodes - before < one_by_one * 3 // 4


def test_an_answer_in_progress_rides_in_another_slots_burst_and_both_stay_exact():
    """A validator burst's decode also evaluates the next token of each answer in progress (`_riders`),
    so a speculating client does not cost the others a decode per round; every row is computed as
    it is alone, so the long answer and the burst's tokens are exactly what they are alone."""
    import threading

    from utils.embedded.runtime.jobs import Job
    from utils.sampling import SamplingOptions

    with direct_runner(MODEL, parallel=2) as runner:
        long_prompt, context = PROMPTS[1].encode(), PROMPTS[0].encode()
        [(alone, _)] = run_jobs(runner, [long_prompt], 4 * NUM_PREDICT, together=False)
        [(drafts, _)] = run_jobs(runner, [context], 4, together=False)
        prompts = [context + b"".join(runner.pieces[t] for t in drafts[:i]) for i in range(5)]
        burst_alone = [made for made, _ in run_jobs(runner, prompts, 1, together=True)]
        rides, decode_with = [], runner._decode_with
        runner._decode_with = lambda *args: rides.append(len(args[2])) or decode_with(*args)
        made, finished = [], threading.Event()
        runner.submit(Job(long_prompt, SamplingOptions(temperature=0.0), 4 * NUM_PREDICT, None,
                          on_token=lambda info: made.append(info.token), on_done=lambda _: finished.set()))
        bursts = []
        while not finished.is_set():
            if len(made) > 2:
                bursts.append([made for made, _ in run_jobs(runner, prompts, 1, together=True)])
        assert made == alone and bursts and all(burst == burst_alone for burst in bursts)
        assert rides and set(rides) == {1}, rides  # the long answer's token went into burst decodes


def test_a_failure_between_tokens_ends_the_answers_with_an_error_and_the_worker_goes_on():
    """A llama.cpp failure while answers are in progress is each answer's error, not the worker's end."""
    from utils.embedded.runtime.jobs import RunnerError

    with direct_runner(MODEL) as runner:
        working = runner._decode_across

        def fail_once(items):
            runner._decode_across = working
            raise RuntimeError("decode failed")

        runner._decode_across = fail_once
        [(made, failed)] = run_jobs(runner, [PROMPTS[1].encode()], NUM_PREDICT, together=False)
        assert isinstance(failed, RunnerError) and failed.status == 500 and "decode failed" in str(failed)
        assert len(made) == 1  # the first token came from the prompt's own evaluation
        [(made, done)] = run_jobs(runner, [PROMPTS[1].encode()], NUM_PREDICT, together=False)
        assert not isinstance(done, RunnerError) and len(made) == NUM_PREDICT


def test_a_request_waiting_for_the_only_slot_starts_when_the_answer_before_it_ends():
    """One slot (a server that serialises, like Ollama with OLLAMA_NUM_PARALLEL=1): a request that came
    while an answer was in progress waits for it, then is answered, with nothing else arriving to wake
    the worker. (It once waited for the next request: a validator burst's last request waited forever.)"""
    import threading

    from utils.embedded.runtime.jobs import Job
    from utils.sampling import SamplingOptions

    with direct_runner(MODEL, batch=False) as runner:
        made, finished = [[], []], [threading.Event(), threading.Event()]
        runner.submit_all([Job(prompt.encode(), SamplingOptions(temperature=0.0), 8, None,
                               on_token=lambda info, i=i: made[i].append(info.token),
                               on_done=lambda _, i=i: finished[i].set()) for i, prompt in enumerate(PROMPTS[:2])])
        assert finished[0].wait(60) and finished[1].wait(60), [len(tokens) for tokens in made]
        assert [len(tokens) for tokens in made] == [8, 8]
