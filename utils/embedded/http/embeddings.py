"""Embeddings from the loaded GGUF in llama.cpp's embedding mode: Ollama's `/api/embed`, its legacy
`/api/embeddings`, and the OpenAI-compatible `/v1/embeddings`.

Each model gets a second llama.cpp context with embeddings on, loaded on first use. The vector is
what Ollama's runner reads: the sequence's pooled embedding when the model declares a pooling
type, else the last token's hidden state (a chat model such as smollm2 declares none). Each input is
evaluated alone, so a batch's vectors equal those of the inputs sent one by one. `/api/embed`
L2-normalises (and after `dimensions` truncates, normalises again), as Ollama does; the legacy
endpoint returns the raw vector, as Ollama's does.
"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from utils.api.http import ApiError, json_response
from utils.api.openai import error_body
from utils.api.schemas import Options
from utils.embedded.engine import _COMPUTE  # one OpenMP team for every llama.cpp evaluation

CAUSAL_MICRO_BATCH = 512


class Embedder:
    """A model's embedding context; `vector` runs on the compute thread, one input at a time."""

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
            ctx.decode(batch)
            pointer = (llama_cpp.llama_get_embeddings_seq(ctx.ctx, 0) if self.pooled
                       else llama_cpp.llama_get_embeddings_ith(ctx.ctx, len(tokens) - 1))
            return np.ctypeslib.as_array(pointer, shape=(self.size,)).astype(np.float32)

    def close(self) -> None:
        with self.lock:
            self.llama.close()


def normalized(vector: np.ndarray) -> np.ndarray:
    if not np.all(np.isfinite(vector)):
        raise ApiError("embedding contains NaN or Inf values", 500)
    return vector / max(float(np.linalg.norm(vector)), 1e-12)


class EmbedBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    input: Any = None
    truncate: bool = True
    dimensions: int | None = None
    options: Options = Field(default_factory=Options)
    keep_alive: Any = None


class LegacyBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    prompt: str = ""
    options: Options = Field(default_factory=Options)
    keep_alive: Any = None


def inputs_of(value: Any) -> list[str]:
    """Ollama's reading of `input`: a string (empty: nothing), a list of strings, or nothing."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    raise ApiError("invalid input type", 400)


async def embed(models: Any, body: EmbedBody, *, normalize: bool = True) -> dict[str, Any]:
    """Ollama's EmbedResponse for `body`: one vector per input, in order."""
    started = time.perf_counter()
    texts = inputs_of(body.input)
    if body.dimensions is not None and body.dimensions < 0:
        raise ApiError("dimensions must be a positive number", 400)
    embedder, _ = await models.embedder(body.model, body.options.num_ctx, body.keep_alive)
    loaded = time.perf_counter()
    if body.dimensions and body.dimensions > embedder.size:
        raise ApiError(f"dimensions {body.dimensions} is more than the model's embedding size ({embedder.size})", 400)
    vectors, count = [], 0
    for text in texts:
        tokens = embedder.fit(embedder.tokenize(text), body.truncate)
        if not tokens:
            raise ApiError("the input has no tokens to embed", 400)
        count += len(tokens)
        vector = await asyncio.wrap_future(_COMPUTE.submit(embedder.vector, tokens))
        if normalize:
            vector = normalized(vector)
            if body.dimensions and body.dimensions < embedder.size:
                vector = normalized(vector[: body.dimensions])
        vectors.append(vector)
    return {"model": body.model, "embeddings": [v.tolist() for v in vectors],
            "total_duration": int((time.perf_counter() - started) * 1e9),
            "load_duration": int((loaded - started) * 1e9), "prompt_eval_count": count}


def register(app: FastAPI, models: Any) -> None:
    """The three embedding routes; `models` is the server's Models (embedder(), loading by name)."""

    @app.post("/api/embed")
    async def api_embed(body: EmbedBody) -> Response:
        return json_response(await embed(models, body))

    @app.post("/api/embeddings")
    async def api_embeddings(body: LegacyBody) -> Response:
        if not body.prompt:  # Ollama: an empty prompt only loads the model
            await models.embedder(body.model, body.options.num_ctx, body.keep_alive)
            return json_response({"embedding": []})
        answer = await embed(models, EmbedBody(model=body.model, input=body.prompt, options=body.options,
                                               keep_alive=body.keep_alive), normalize=False)
        return json_response({"embedding": answer["embeddings"][0]})

    @app.post("/v1/embeddings")
    async def openai_embeddings(raw: dict[str, Any]) -> Response:
        return await _openai(models, raw)


async def _openai(models: Any, raw: dict[str, Any]) -> Response:
    """OpenAI's embeddings API as Ollama's layer answers it (openai/openai.go): float or base64 vectors."""
    encoding = str(raw.get("encoding_format") or "float")
    if encoding.lower() not in ("float", "base64"):
        return json_response(error_body(f"Invalid value for 'encoding_format' = {encoding}. "
                                        "Supported values: ['float', 'base64']."), 400)
    value = raw.get("input")
    if value == "":
        value = [""]
    if value is None or value == []:
        return json_response(error_body("invalid input"), 400)
    try:
        body = EmbedBody(model=str(raw.get("model") or ""), input=value, dimensions=raw.get("dimensions"))
        answer = await embed(models, body)
    except ApiError as error:
        kind = {400: "invalid_request_error", 404: "not_found_error"}.get(error.status, "api_error")
        return json_response(error_body(error.message, kind), error.status)
    except ValueError as error:  # a field of the wrong type
        return json_response(error_body(str(error).splitlines()[0]), 400)
    data = [{"object": "embedding", "index": i,
             "embedding": (base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode()
                           if encoding.lower() == "base64" else v)}
            for i, v in enumerate(answer["embeddings"])]
    count = answer["prompt_eval_count"]
    return json_response({"object": "list", "data": data, "model": body.model,
                          "usage": {"prompt_tokens": count, "total_tokens": count}})
