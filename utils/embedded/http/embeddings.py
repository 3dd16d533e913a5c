"""The embedding routes: Ollama's `/api/embed`, its legacy `/api/embeddings`, and the
OpenAI-compatible `/v1/embeddings`, answered from the model's embedding context
(utils/embedded/runtime/embedder.py, loaded on first use). `/api/embed` L2-normalises (and after
`dimensions` truncates, normalises again), as Ollama does; the legacy endpoint returns the raw
vector, as Ollama's does.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from utils.api.http import ApiError, json_response
from utils.api.openai import error_body
from utils.api.schemas import Options
from utils.embedded.http.state import state_of
from utils.embedded.runtime.loaded import LoadedModels

router = APIRouter()  # included by api.create_app; the routes find the server's state with state_of


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


async def embed(models: LoadedModels, body: EmbedBody, *, normalize: bool = True) -> dict[str, Any]:
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
        vector = await embedder.compute(tokens)
        if normalize:
            vector = normalized(vector)
            if body.dimensions and body.dimensions < embedder.size:
                vector = normalized(vector[: body.dimensions])
        vectors.append(vector)
    return {"model": body.model, "embeddings": [v.tolist() for v in vectors],
            "total_duration": int((time.perf_counter() - started) * 1e9),
            "load_duration": int((loaded - started) * 1e9), "prompt_eval_count": count}


@router.post("/api/embed")
async def api_embed(body: EmbedBody, request: Request) -> Response:
    return json_response(await embed(state_of(request).models, body))


@router.post("/api/embeddings")
async def api_embeddings(body: LegacyBody, request: Request) -> Response:
    models = state_of(request).models
    if not body.prompt:  # Ollama: an empty prompt only loads the model
        await models.embedder(body.model, body.options.num_ctx, body.keep_alive)
        return json_response({"embedding": []})
    answer = await embed(models, EmbedBody(model=body.model, input=body.prompt, options=body.options,
                                           keep_alive=body.keep_alive), normalize=False)
    return json_response({"embedding": answer["embeddings"][0]})


@router.post("/v1/embeddings")
async def openai_embeddings(raw: dict[str, Any], request: Request) -> Response:
    return await _openai(state_of(request).models, raw)


async def _openai(models: LoadedModels, raw: dict[str, Any]) -> Response:
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
