"""`format` on the embedded server: "json" and JSON schemas, constrained by llama.cpp grammars.

The prompts ask for prose on purpose: left alone, the models answer with text that is not JSON, so
a valid, schema-conforming answer shows the grammar at work, not a model that happened to comply.
"""

from __future__ import annotations

import json

import httpx
import jsonschema
import ollama
import pytest
from pydantic import BaseModel, Field

SMALL = "smollm2:135m"
STRUCTURED = "qwen2.5-coder:0.5b"
GREEDY = {"temperature": 0, "num_predict": 120}
PROSE = "Write a short poem about a cat called Tom who is 3 years old."


class Pet(BaseModel):
    name: str
    age: int
    is_indoor: bool
    toys: list[str] = Field(max_length=3)  # a small model repeats list items until the token limit


def test_without_format_the_prompt_gets_prose(server_url):
    answer = ollama.Client(host=server_url).chat(model=SMALL, messages=[{"role": "user", "content": PROSE}],
                                                 options={**GREEDY, "num_predict": 30})
    with pytest.raises(ValueError):
        json.loads(answer.message.content)


def test_a_pydantic_schema_through_ollama_python_gives_a_valid_object(server_url):
    client = ollama.Client(host=server_url)
    messages = [{"role": "user", "content": PROSE}]
    answer = client.chat(model=SMALL, messages=messages, format=Pet.model_json_schema(), options=GREEDY)
    pet = Pet.model_validate_json(answer.message.content)
    assert pet.name and answer.done_reason == "stop"
    streamed = "".join(part.message.content for part in client.chat(
        model=SMALL, messages=messages, format=Pet.model_json_schema(), options=GREEDY, stream=True))
    assert streamed == answer.message.content  # the same grammar, token by token
    generated = client.generate(model=SMALL, prompt=PROSE, format=Pet.model_json_schema(), options=GREEDY)
    Pet.model_validate_json(generated.response)


def test_format_json_gives_a_json_object_and_a_schema_with_constraints_is_kept(server_url):
    client = ollama.Client(host=server_url)
    answer = client.generate(model=SMALL, prompt=PROSE, format="json", options=GREEDY)
    assert isinstance(json.loads(answer.response), dict)
    schema = {"type": "object", "additionalProperties": False, "required": ["colour", "count"],
              "properties": {"colour": {"type": "string", "enum": ["red", "green", "blue"]},
                             "count": {"type": "integer", "minimum": 1, "maximum": 9}}}
    seeded = {"temperature": 0.9, "seed": 7, "num_predict": 60}  # sampled: the grammar holds for any draw
    answer = client.generate(model=SMALL, prompt="Tell me about the sky.", format=schema, options=seeded)
    jsonschema.validate(json.loads(answer.response), schema)


def test_a_format_that_is_neither_json_nor_a_schema_is_refused(server_url):
    """As Ollama: a format that is not one is a 400; a schema that llama.cpp cannot turn into a grammar
    Ollama's 500 "invalid JSON schema in format", and so is one whose pattern it would let any string
    through for (Ollama would answer without holding it; here it is never loosened)."""
    for bad, words, status in (
            ("xml", 'invalid format: "xml"', 400), ([1, 2], "invalid format", 400),
            ({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}, "invalid JSON schema in format", 500),
            ({"type": "object", "properties": {"a": {"type": "string", "pattern": "[a-z]+"}}}, "pattern", 500)):
        response = httpx.post(f"{server_url}/api/generate", timeout=60, json={
            "model": SMALL, "prompt": "hi", "format": bad, "stream": False})
        assert response.status_code == status and words in response.json()["error"], (bad, response.text)


def test_openai_response_format_json_schema(server_url):
    from openai import OpenAI

    sdk = OpenAI(base_url=f"{server_url}/v1", api_key="unused", max_retries=0)
    answer = sdk.chat.completions.create(
        model=SMALL, messages=[{"role": "user", "content": PROSE}], temperature=0, max_tokens=120,
        response_format={"type": "json_schema", "json_schema": {"name": "pet", "schema": Pet.model_json_schema()}})
    Pet.model_validate_json(answer.choices[0].message.content)
    answer = sdk.chat.completions.create(model=SMALL, messages=[{"role": "user", "content": PROSE}], temperature=0,
                                         max_tokens=120, response_format={"type": "json_object"})
    assert isinstance(json.loads(answer.choices[0].message.content), dict)


def test_langchain_with_structured_output_returns_a_validated_object(server_url):
    from langchain_ollama import ChatOllama

    class Person(BaseModel):
        """A person mentioned in the text."""

        name: str
        age: int
        city: str

    model = ChatOllama(model=STRUCTURED, base_url=server_url, temperature=0, num_predict=120)
    structured = model.with_structured_output(Person, method="json_schema")
    person = structured.invoke("Alice is 31 years old and lives in Lisbon. Extract the person.")
    assert isinstance(person, Person)
    assert person.name == "Alice" and person.age == 31 and person.city == "Lisbon"
