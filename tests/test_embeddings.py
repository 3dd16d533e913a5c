"""Embeddings on the embedded server through real clients: ollama-python's `embed`/`embeddings` and the
OpenAI SDK's `embeddings.create` (whose default asks for base64), on smollm2:135m."""

from __future__ import annotations

import httpx
import numpy as np
import ollama
import openai
import pytest

SMALL = "smollm2:135m"
WIDTH = 576  # smollm2-135m's hidden size
SMALL_CONTEXT = {"num_ctx": 256}
LONG = "word " * 400  # more tokens than a 256-token context


async def still_serving(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        reply = await http.post("/api/embed", json={"model": SMALL, "input": "still here"})
        assert reply.status_code == 200 and len(reply.json()["embeddings"][0]) == WIDTH, reply.text
        reply = await http.post("/api/generate", json={"model": SMALL, "prompt": "Hi", "stream": False,
                                                       "options": {"num_predict": 2, "temperature": 0}})
        assert reply.status_code == 200 and reply.json()["done"], reply.text


def test_embed_shapes_normalisation_and_counters(server_url):
    client = ollama.Client(host=server_url)
    answer = client.embed(model=SMALL, input=["Why is the sky blue?", "Why is the grass green?"])
    vectors = np.array(answer.embeddings)
    assert vectors.shape == (2, WIDTH)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)  # L2-normalised, as Ollama's
    assert not np.allclose(vectors[0], vectors[1])
    assert answer.model == SMALL
    assert answer.total_duration >= answer.load_duration >= 0 and answer.total_duration > 0
    one = client.embed(model=SMALL, input="Why is the sky blue?")
    assert len(one.embeddings) == 1 and len(one.embeddings[0]) == WIDTH
    two = client.embed(model=SMALL, input="Why is the grass green?")
    assert answer.prompt_eval_count == one.prompt_eval_count + two.prompt_eval_count > 2  # every input's tokens
    assert client.embed(model=SMALL, input=[]).embeddings == []


def test_a_batch_equals_its_inputs_one_by_one_in_order(server_url):
    client = ollama.Client(host=server_url)
    batch = client.embed(model=SMALL, input=["a", "b", "a longer third input"]).embeddings
    alone = [client.embed(model=SMALL, input=text).embeddings[0] for text in ("a", "b", "a longer third input")]
    assert np.allclose(batch, alone, atol=1e-6)
    # Similar texts are closer than unrelated ones: the vectors mean something.
    cat, kitten, tax = client.embed(model=SMALL, input=["the cat sat", "the kitten sat", "income tax form"]).embeddings
    assert np.dot(cat, kitten) > np.dot(cat, tax)


def test_legacy_embeddings_are_the_same_vector_not_normalised(server_url):
    client = ollama.Client(host=server_url)
    raw = np.array(client.embeddings(model=SMALL, prompt="Here is an article about llamas...").embedding)
    unit = np.array(client.embed(model=SMALL, input="Here is an article about llamas...").embeddings[0])
    assert raw.shape == (WIDTH,) and abs(np.linalg.norm(raw) - 1.0) > 0.1
    assert np.allclose(raw / np.linalg.norm(raw), unit, atol=1e-5)
    assert client.embeddings(model=SMALL, prompt="").embedding == []  # Ollama: an empty prompt only loads


def test_dimensions_truncate_and_renormalise(server_url):
    client = ollama.Client(host=server_url)
    full = np.array(client.embed(model=SMALL, input="hello world").embeddings[0])
    short = np.array(client.embed(model=SMALL, input="hello world", dimensions=64).embeddings[0])
    assert short.shape == (64,) and np.isclose(np.linalg.norm(short), 1.0, atol=1e-5)
    assert np.allclose(short, full[:64] / np.linalg.norm(full[:64]), atol=1e-5)


async def test_too_long_input_is_truncated_or_refused(server_url):
    client = ollama.Client(host=server_url)
    cut = client.embed(model=SMALL, input=LONG, options=SMALL_CONTEXT)
    assert cut.prompt_eval_count == 256 and len(cut.embeddings[0]) == WIDTH  # truncate defaults to true
    with pytest.raises(ollama.ResponseError) as refused:
        client.embed(model=SMALL, input=LONG, truncate=False, options=SMALL_CONTEXT)
    assert refused.value.status_code == 400 and refused.value.error == "input exceeds maximum context length"
    await still_serving(server_url)


async def test_refusals_are_4xx_with_a_message(server_url):
    async with httpx.AsyncClient(base_url=server_url, timeout=120) as http:
        for body, status, words in (
            ({"model": SMALL, "input": [1, 2]}, 400, "invalid input type"),
            ({"model": SMALL, "input": {"text": "x"}}, 400, "invalid input type"),
            ({"model": SMALL, "input": "x", "dimensions": 5000}, 400, "embedding size"),
            ({"model": SMALL, "input": "x", "dimensions": -1}, 400, "dimensions"),
            ({"model": SMALL, "input": "x", "keep_alive": "soon"}, 400, "invalid duration"),
            ({"model": "nosuch:1b", "input": "x"}, 404, "not found"),
            ({"input": "x"}, 400, "model"),
        ):
            reply = await http.post("/api/embed", json=body)
            assert reply.status_code == status and words in reply.json()["error"], (body, reply.text)
        reply = await http.post("/api/embeddings", json={"model": "nosuch:1b", "prompt": "x"})
        assert reply.status_code == 404 and "not found" in reply.json()["error"]
    await still_serving(server_url)


async def test_openai_sdk_embeddings(server_url):
    client = openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused")
    reference = ollama.Client(host=server_url).embed(model=SMALL, input=["first", "second"]).embeddings
    answer = client.embeddings.create(model=SMALL, input=["first", "second"])  # the SDK asks for base64
    assert answer.object == "list" and answer.model == SMALL
    assert [item.index for item in answer.data] == [0, 1]
    assert all(item.object == "embedding" and len(item.embedding) == WIDTH for item in answer.data)
    assert np.allclose([item.embedding for item in answer.data], reference, atol=1e-6)
    assert answer.usage.prompt_tokens == answer.usage.total_tokens > 0
    floats = client.embeddings.create(model=SMALL, input="first", encoding_format="float", dimensions=32)
    assert len(floats.data[0].embedding) == 32
    with pytest.raises(openai.NotFoundError) as missing:
        client.embeddings.create(model="nosuch:1b", input="x")
    assert "not found" in missing.value.body["message"]
    async with httpx.AsyncClient(base_url=server_url, timeout=120) as http:
        for body in ({"model": SMALL, "input": []}, {"model": SMALL},
                     {"model": SMALL, "input": "x", "encoding_format": "int8"}):
            reply = await http.post("/v1/embeddings", json=body)
            assert reply.status_code == 400 and reply.json()["error"]["message"], reply.text
    await still_serving(server_url)


def test_langchain_ollama_embeddings(server_url):
    from langchain_ollama import OllamaEmbeddings

    embedder = OllamaEmbeddings(model=SMALL, base_url=server_url)
    documents = embedder.embed_documents(["first", "second"])
    query = embedder.embed_query("first")
    assert np.array(documents).shape == (2, WIDTH)
    assert np.allclose(query, documents[0], atol=1e-6)
