"""Long agent prompts on `cli.py serve`, as on Ollama: the server-wide context (OLLAMA_CONTEXT_LENGTH),
a cut prompt said to the client, pings while a streamed Messages prompt is read, a client that
leaves stopping the reading, and a repeated turn reading only its new tokens.

One server of its own (started with OLLAMA_CONTEXT_LENGTH), smollm2:135m, prompts of a few thousand
tokens. What the server read is taken from its log ("prompt of N tokens: C cached, R to read").
"""

from __future__ import annotations

import json
import re
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.support.own_server import own_server

MODEL = "smollm2:135m"
CONTEXT = 2560  # not Ollama's default 4096; a chat past 1,920 tokens (3/4 of it) is cut
READ = re.compile(r"prompt of (\d+) tokens: (\d+) cached, (\d+) to read")


def rules(count: int, seed: str) -> str:
    """About 42 tokens a line: a long system prompt, as an agent's, unique to `seed` (no cache hit)."""
    return f"Session {seed}.\n" + "".join(
        f"Rule {i}: the file src/module_{i}.py keeps the parser for format {i * 7}; never edit it "
        f"without running tests/test_{i}.py first.\n" for i in range(count))


class Server:
    def __init__(self, url: str, log: Path):
        self.url, self.log, self.seen = url, log, 0

    def mark(self) -> None:
        """Later `wait_log` calls read only what the server logs from now on."""
        self.seen = self.log.stat().st_size

    def wait_log(self, pattern: re.Pattern[str] | str, deadline: float = 300.0) -> re.Match[str]:
        pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            if match := pattern.search(self.log.read_bytes()[self.seen:].decode(errors="replace")):
                return match
            time.sleep(0.05)
        raise AssertionError(f"the server never logged {pattern.pattern!r}")

    def reads(self) -> list[tuple[int, int, int]]:
        """The (tokens, cached, read) lines logged since `mark`."""
        text = self.log.read_bytes()[self.seen:].decode(errors="replace")
        return [tuple(map(int, match)) for match in READ.findall(text)]  # type: ignore[misc]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("long-prompts")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OLLAMA_CONTEXT_LENGTH", str(CONTEXT))
        with own_server(folder, (MODEL,)) as url:
            yield Server(url, folder / "server.log")


def test_ollama_context_length_sets_the_context_of_every_model(server: Server) -> None:
    httpx.post(f"{server.url}/api/generate", json={"model": MODEL, "prompt": "Hi", "options": {"num_predict": 1}},
               timeout=120).raise_for_status()
    loaded = httpx.get(f"{server.url}/api/ps", timeout=10).json()["models"]
    assert [(m["name"], m["context_length"]) for m in loaded] == [(MODEL, CONTEXT)]


def test_a_streamed_messages_prompt_is_kept_alive_with_pings_while_it_is_read(server: Server) -> None:
    client = anthropic.Anthropic(base_url=server.url, api_key="ollama", max_retries=0)
    server.mark()
    # The SDK's event iterator skips pings (as a client should): the raw stream shows them.
    with client.messages.with_streaming_response.create(
            model=MODEL, max_tokens=8, stream=True, system=rules(40, uuid.uuid4().hex),
            messages=[{"role": "user", "content": "Which file keeps format 70?"}]) as response:
        events = [line.removeprefix("event: ") for line in response.iter_lines() if line.startswith("event: ")]
    read = server.reads()
    assert read and read[-1][2] > 1500  # a long prompt was read (about 1,700 tokens) ...
    first_content = next(i for i, kind in enumerate(events) if kind.startswith("content_block"))
    assert events[:2] == ["message_start", "ping"]  # ... and the client heard from the server meanwhile
    assert set(events[1:first_content]) == {"ping"}
    assert events[-1] == "message_stop"


def test_a_client_that_leaves_stops_the_reading_of_its_prompt(server: Server) -> None:
    body = json.dumps({"model": MODEL, "stream": True, "options": {"num_predict": 8}, "messages": [
        {"role": "system", "content": rules(40, uuid.uuid4().hex)}, {"role": "user", "content": "Go."}]}).encode()
    port = int(server.url.rsplit(":", 1)[1])
    server.mark()
    with socket.create_connection(("127.0.0.1", port)) as connection:
        connection.sendall(b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        tokens, _, to_read = map(int, server.wait_log(READ).groups())
        assert to_read > 1500
    stopped = server.wait_log(r"prompt abandoned by its client: stopped after reading (\d+) of (\d+) new tokens")
    assert int(stopped.group(1)) < int(stopped.group(2))  # stopped before the end of the prompt
    # The model answers the next client as soon as its batch ends, not after the abandoned prompt.
    answer = httpx.post(f"{server.url}/api/generate", timeout=120, json={
        "model": MODEL, "prompt": "Hi", "stream": False, "options": {"num_predict": 1}}).json()
    assert answer["done"]


def test_a_prompt_cut_to_fit_is_said_in_a_header_on_every_api(server: Server) -> None:
    long = rules(70, uuid.uuid4().hex) + "Which file keeps format 70?"  # about 2,950 tokens: past 2,560
    messages = httpx.post(f"{server.url}/v1/messages", timeout=300, json={
        "model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": long}]})
    assert messages.status_code == 200, messages.text  # as Ollama: answered from the cut prompt
    assert re.fullmatch(r"messages=0, tokens=\d{4}", messages.headers["X-Prompt-Truncated"])
    assert messages.json()["type"] == "message"
    chat = httpx.post(f"{server.url}/v1/chat/completions", timeout=300, json={
        "model": MODEL, "max_tokens": 2, "stream": True, "messages": [{"role": "user", "content": long}]})
    assert chat.status_code == 200 and "tokens=" in chat.headers["X-Prompt-Truncated"]
    short = httpx.post(f"{server.url}/v1/responses", timeout=300, json={"model": MODEL, "input": "Hi",
                                                                          "max_output_tokens": 2})
    assert short.status_code == 200 and "X-Prompt-Truncated" not in short.headers


def turns(api: str, url: str, system: str) -> None:
    """Two turns of an agent on `api`: the same system prompt, the second turn after the first's answer."""
    first, second = "List the rules about format 70.", "Now the rules about format 140, briefly, as a list."
    if api == "messages":  # as Claude Code sends it: a billing block first, whose `cch` changes every request
        def billed() -> list[dict[str, str]]:
            billing = ("x-anthropic-billing-header: cc_version=2.1.328.e1f; cc_entrypoint=sdk-cli; "
                       f"cch={uuid.uuid4().hex[:5]};")
            return [{"type": "text", "text": billing}, {"type": "text", "text": system}]
        client = anthropic.Anthropic(base_url=url, api_key="ollama", max_retries=0)
        reply = client.messages.create(model=MODEL, max_tokens=8, system=billed(),  # type: ignore[arg-type]
                                       messages=[{"role": "user", "content": first}])
        said = reply.content[0].text if reply.content else ""  # type: ignore[union-attr]
        client.messages.create(model=MODEL, max_tokens=8, system=billed(), messages=[  # type: ignore[arg-type]
            {"role": "user", "content": first}, {"role": "assistant", "content": said},
            {"role": "user", "content": second}])
    elif api == "responses":
        oa = openai.OpenAI(base_url=f"{url}/v1", api_key="ollama", max_retries=0)
        answer = oa.responses.create(model=MODEL, instructions=system, input=first, max_output_tokens=8,
                                     temperature=0)
        oa.responses.create(model=MODEL, instructions=system, max_output_tokens=8, temperature=0, input=[
            {"role": "user", "content": first}, {"role": "assistant", "content": answer.output_text},
            {"role": "user", "content": second}])
    else:
        chat = [{"role": "system", "content": system}, {"role": "user", "content": first}]
        if api == "chat":
            said = httpx.post(f"{url}/api/chat", timeout=300, json={
                "model": MODEL, "stream": False, "messages": chat, "options": {"num_predict": 8, "temperature": 0}},
            ).json()["message"]["content"]
        else:
            oa = openai.OpenAI(base_url=f"{url}/v1", api_key="ollama", max_retries=0)
            said = oa.chat.completions.create(model=MODEL, messages=chat, max_tokens=8,  # type: ignore[arg-type]
                                              temperature=0).choices[0].message.content or ""
        chat += [{"role": "assistant", "content": said}, {"role": "user", "content": second}]
        if api == "chat":
            httpx.post(f"{url}/api/chat", timeout=300, json={"model": MODEL, "stream": False, "messages": chat,
                                                             "options": {"num_predict": 8, "temperature": 0}})
        else:
            oa.chat.completions.create(model=MODEL, messages=chat,  # type: ignore[arg-type]
                                       max_tokens=8, temperature=0)


@pytest.mark.parametrize("api", ["chat", "chat_completions", "messages", "responses"])
def test_a_repeated_agent_turn_reads_only_its_new_tokens(server: Server, api: str) -> None:
    server.mark()
    turns(api, server.url, rules(30, uuid.uuid4().hex))
    (first_total, first_cached, first_read), (total, cached, read) = server.reads()
    assert first_read > 1100 and first_cached < 100  # turn 1 reads its whole prompt (a new system prompt)
    assert cached >= first_total - 1  # turn 2 finds all of turn 1's prompt cached ...
    assert read < 80  # ... and reads only its answer and the new question (a few dozen tokens)
