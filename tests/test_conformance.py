"""Conformance: the example requests of Ollama's API reference (the project's own copy, as data in
tests/conformance/ollama_api.json) against the embedded server, checking the status and the type of
every documented field of each response (not the generated text).

The server has its own data folder: the examples pull, create, copy and delete models. Pulls copy the
shared models folder's file (SPEC_MODEL_SOURCES, only read) instead of downloading it.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from config import Settings
from utils.embedded.server import EmbeddedServer
from utils.embedded.store.models import ModelStore

DATA = json.loads((Path(__file__).parent / "conformance" / "ollama_api.json").read_text())
SHARED = ModelStore(Settings().models_dir)
PLACEHOLDERS = {"{smollm2_sha256}": SHARED.spec("smollm2:135m").sha256,
                "{coder_path}": str(SHARED.path("qwen2.5-coder:0.5b"))}


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> str:
    data = tmp_path_factory.mktemp("conformance-data")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPEC_DATA_DIR", str(data))
        patch.setenv("SPEC_MODEL_SOURCES", str(SHARED.models_dir))
        running = EmbeddedServer(log_path=data / "server.log")
        running.start()
        try:
            yield running.url
        finally:
            running.stop()


def filled(value: Any) -> Any:
    """The example with this machine's digests and paths in place of its placeholders."""
    text = json.dumps(value)
    for placeholder, actual in PLACEHOLDERS.items():
        text = text.replace(placeholder, actual)
    return json.loads(text)


def is_a(value: Any, kind: str) -> bool:
    """`value` has the type the data names ("int+": a positive int, "str+": a non-empty string, ...)."""
    base, nonempty = kind.rstrip("+"), kind.endswith("+")
    number = lambda v: isinstance(v, int | float) and not isinstance(v, bool)  # noqa: E731
    checks = {
        "str": lambda v: isinstance(v, str),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
        "bool": lambda v: isinstance(v, bool),
        "number": number,
        "dict": lambda v: isinstance(v, dict),
        "list": lambda v: isinstance(v, list),
        "datetime": lambda v: isinstance(v, str) and bool(re.match(r"\d{4}-\d\d-\d\dT", v))
        and datetime.fromisoformat(v.replace("Z", "+00:00")) is not None,
        "list[int]": lambda v: isinstance(v, list) and all(isinstance(x, int) for x in v),
        "list[number]": lambda v: isinstance(v, list) and all(number(x) for x in v),
        "list[dict]": lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v),
        "list[list[number]]": lambda v: isinstance(v, list) and all(
            isinstance(x, list) and x and all(number(y) for y in x) for x in v),
    }
    if not checks[base](value):
        return False
    return not nonempty or (value > 0 if base == "int" else len(value) > 0)


def check_fields(obj: dict[str, Any], fields: dict[str, str], where: str) -> None:
    for field, kind in fields.items():
        assert field in obj, f"{where}: no '{field}' in {obj}"
        assert is_a(obj[field], kind), f"{where}: '{field}' = {obj[field]!r} is not {kind}"


def send(url: str, example: dict[str, Any]) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=300) as http:
        body = example.get("body")
        return http.request(example["method"], filled(example["path"]),
                            content=json.dumps(filled(body)) if body is not None else None)


@pytest.fixture(scope="module")
def replies(server) -> dict[str, httpx.Response]:
    """Every example's reply, the examples sent once in the reference's order: they are one session
    (pull, then generate; copy, then delete, then delete again), whatever order they are checked in."""
    return {example["name"]: send(server, example) for example in DATA["examples"]}


@pytest.mark.parametrize("example", DATA["examples"], ids=[e["name"] for e in DATA["examples"]])
def test_example(server, replies, example):
    reply = replies[example["name"]]
    assert reply.status_code == example["status"], reply.text
    kind = example["response"]
    if kind == "empty":
        assert reply.content == b""
        return
    if kind == "ndjson":
        assert reply.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in reply.text.splitlines() if line.strip()]
        final, chunks = lines[-1], lines[:-1]
        for chunk in chunks:
            check_fields(chunk, example.get("chunk", {}), "chunk")
            if "message" in chunk:
                check_fields(chunk["message"], example.get("chunk_message", {"role": "str+", "content": "str"}),
                             "chunk message")
        if "first" in example:
            assert lines[0] == example["first"]
        if "some_chunk" in example:
            assert any(all(f in c and is_a(c[f], k) for f, k in example["some_chunk"].items()) for c in chunks)
    else:
        assert reply.headers["content-type"].startswith("application/json")
        final = reply.json()
    assert "error" not in final or example["status"] >= 400, final
    check_fields(final, example.get("fields", {}), "response")
    for field, value in example.get("values", {}).items():
        assert final[field] == value, f"'{field}' is {final[field]!r}, the reference says {value!r}"
    check_fields(final.get("message", {}), example.get("message", {}), "message")
    check_fields(final.get("details", {}), example.get("details", {}), "details")
    for field, size in example.get("length", {}).items():
        assert len(final[field]) == size
    for field, fields in example.get("each", {}).items():
        for item in final[field]:
            check_fields(item, fields, field)
            check_fields(item["details"], example.get("each_details", {}).get(field, {}), f"{field} details")
    if "repeat_equal" in example:
        again = send(server, example).json()
        assert again[example["repeat_equal"]] == final[example["repeat_equal"]]


def test_the_server_still_serves_after_every_example(server, replies):
    with httpx.Client(base_url=server, timeout=120) as http:
        reply = http.post("/api/generate", json={"model": "smollm2:135m", "prompt": "Hi", "stream": False,
                                                 "options": {"num_predict": 2, "temperature": 0}})
    assert reply.status_code == 200 and reply.json()["done"], reply.text
