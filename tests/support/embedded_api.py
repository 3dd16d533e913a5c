"""Talking to the embedded server's Ollama API in the tests of it (tests/test_embedded_api*.py): the
official client for most requests, plain httpx where the client cannot express one."""

from __future__ import annotations

import httpx
import ollama

from tests.support.models import SMALL

GREEDY = {"temperature": 0}
DEFAULT_NUM_CTX = 4096

# smollm2 keeps counting greedily for thousands of tokens (checked once: 3,946 tokens up to the full
# 4,096 context), so a request on this prompt ends by num_predict, a stop string or a disconnect.
COUNTING = ", ".join(str(i) for i in range(1, 41)) + ","
CODE_CONTEXT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
CHATML_CONTEXT = (
    "<|im_start|>system\nYou are a coding assistant.<|im_end|>\n"
    "<|im_start|>user\nWrite a Python function that checks whether a number is prime.<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def http(server_url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server_url, timeout=120.0)


async def collect(stream) -> tuple[str, list, object]:
    """The streamed text, the non-final chunks and the final chunk of a streaming generate/chat."""
    parts, chunks, final = [], [], None
    async for chunk in stream:
        if chunk.done:
            final = chunk
        else:
            chunks.append(chunk)
            message = getattr(chunk, "message", None)  # chat chunks carry a message, generate a response
            parts.append(message.content if message is not None else chunk.response)
    assert final is not None, "the stream ended without a final chunk"
    return "".join(parts), chunks, final


async def greedy(client: ollama.AsyncClient, prompt: str, num_predict: int, model: str = SMALL, **options):
    options = {**GREEDY, "num_predict": num_predict, **options}
    return await client.generate(model=model, prompt=prompt, raw=True, options=options)


async def restore_default_context(client: ollama.AsyncClient) -> None:
    await greedy(client, "Hello", 1, num_ctx=DEFAULT_NUM_CTX)


async def greedy_pieces(client: ollama.AsyncClient, model: str, context: str, count: int) -> list[str]:
    """The model's own greedy continuation of `context`, one token per piece."""
    stream = await client.generate(
        model=model, prompt=context, raw=True, stream=True, logprobs=True,
        options={**GREEDY, "num_predict": count},
    )
    _, chunks, final = await collect(stream)
    assert final.eval_count == count
    return [chunk.response for chunk in chunks]
