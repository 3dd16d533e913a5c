"""Bad input to the CLI and the engine API (the embedded server's share: test_bad_input_server.py; the
app's: tests/app/test_chat.py).

Each case gets a clear error (CLI: one "error: ..." line and exit code 1 or 2; engine: ValueError or
pydantic's ValidationError) or correct handling, never a stack trace, and the server keeps serving
afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

import cli
from config import Settings
from tests.support.bad_input import HOSTILE_NAMES, still_serving
from tests.support.models import SMALL
from utils.engine.answer import collect
from utils.engine.client import OllamaClient, ServerError
from utils.engine.decoder import build_decoder
from utils.engine.events import GenerationError
from utils.engine.request import GenerationRequest
from utils.sampling import SamplingOptions

ROOT = Path(__file__).resolve().parents[1]
QWEN = "qwen2.5-coder:0.5b"
EMOJI_RTL = "Repeat this line exactly: 🚀 שלום עולם — مرحبا بالعالم 👍🏽 café"


def settings(**update) -> Settings:
    return Settings(**{"k_max": 8, "p_min": 0.2, **update})


async def answer(url: str, target: str, drafter: str, request: GenerationRequest) -> dict:
    server = OllamaClient(url)
    try:
        return await collect(await build_decoder(settings().engine, server, target, drafter), request)
    finally:
        await server.aclose()


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
    (["--prompt", "hi", "--k", "17"], "must be a number from 0 to 16"),
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


# -- the engine API --------------------------------------------------------------------------------


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
    server = OllamaClient(server_url)
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
    server = OllamaClient(server_url)
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
