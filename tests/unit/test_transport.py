"""The engine's HTTP/1.1 transport (utils/engine/transport.py) against a scripted socket server.

The server here is a stand-in, named as such: it answers with exactly the bytes a test gives it, to
show what a real server shows only by chance (a kept-alive connection closed between two requests, an
answer split anywhere, a server that stops answering). The transport against real servers is every
engine test (tests/test_engine_direct.py, tests/test_speculative.py, ...).
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from utils.engine.client import OllamaClient, ServerTimeout, ServerUnreachable
from utils.engine.transport import Transport


class ScriptedServer:
    """Accepts connections; for each request read, writes the next scripted answer (bytes, or a list
    of bytes written apart). `close_after`: close the connection after each answer."""

    def __init__(self, answers: list, close_after: bool = False):
        self.answers, self.close_after = list(answers), close_after
        self.requests: list[bytes] = []
        self.connections = 0
        self.eof_seen = asyncio.Event()
        self.closed = asyncio.Event()  # the server has closed a connection (all its writes done)

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *_: object) -> None:
        self.server.close()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), 0)
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                answer = self.answers.pop(0)
                for part in answer if isinstance(answer, list) else [answer]:
                    writer.write(part)
                    await writer.drain()
                    # Not a wait for anything: a pause between the parts, so that the client is
                    # likely to read them apart (it must give the same result however they arrive).
                    await asyncio.sleep(0.01)
                if self.close_after:
                    return  # closes the connection (finally)
            await reader.read()  # until the client closes
            self.eof_seen.set()
        except (asyncio.IncompleteReadError, ConnectionError):
            self.eof_seen.set()
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self.closed.set()


def json_answer(body: dict) -> bytes:
    data = json.dumps(body).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data)


def chunked(*parts: bytes) -> list[bytes]:
    """A chunked answer, each part written on its own (and the last chunk split across writes)."""
    out = [b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"]
    out += [b"%x\r\n%s\r\n" % (len(part), part) for part in parts]
    return out + [b"0\r\n", b"\r\n"]


async def test_a_request_carries_its_method_path_host_headers_and_json_body():
    script = ScriptedServer([json_answer({"n": 1}), json_answer({"n": 2})])
    async with script as url:
        server = OllamaClient(url + "/prefix")
        try:
            answer = await server._request("POST", "/api/generate", {"prompt": "é"}, {"X-Speculative-Burst": "a 2"})
            assert answer == {"n": 1}
            assert await server._request("GET", "/api/version") == {"n": 2}
        finally:
            await server.aclose()
    assert script.connections == 1  # kept alive
    post, get = script.requests
    head, body = post.split(b"\r\n\r\n")
    assert head.startswith(b"POST /prefix/api/generate HTTP/1.1\r\n")
    assert f"Host: {url.split('//')[1]}".encode() in head and b"X-Speculative-Burst: a 2" in head
    assert json.loads(body) == {"prompt": "é"}
    assert get.startswith(b"GET /prefix/api/version HTTP/1.1\r\n") and b"Content-Length" not in get


async def test_a_chunked_stream_gives_every_line_however_it_is_split():
    lines = [json.dumps({"response": str(i), "done": i == 3}).encode() + b"\n" for i in range(4)]
    joined = b"".join(lines)
    script = ScriptedServer([chunked(joined[:7], joined[7:50], joined[50:])])
    async with script as url:
        server = OllamaClient(url)
        try:
            messages = [m async for m in server._stream("/api/generate", {"stream": True})]
        finally:
            await server.aclose()
    assert [m["response"] for m in messages] == ["0", "1", "2", "3"]


async def test_a_kept_alive_connection_the_server_closed_is_replaced_and_the_request_sent_once():
    script = ScriptedServer([json_answer({"n": 1}), json_answer({"n": 2})], close_after=True)
    async with script as url:
        server = OllamaClient(url)
        try:
            assert await server._request("GET", "/api/version") == {"n": 1}
            await asyncio.wait_for(script.closed.wait(), 5)  # the server has closed that connection
            assert await server._request("POST", "/api/generate", {"a": 1}) == {"n": 2}
        finally:
            await server.aclose()
    assert script.connections == 2 and len(script.requests) == 2


async def test_leaving_a_stream_early_closes_its_connection():
    parts = [json.dumps({"response": "x", "done": False}).encode() + b"\n"] * 50
    script = ScriptedServer([chunked(*parts)])
    async with script as url:
        server = OllamaClient(url)
        try:
            async for _ in server._stream("/api/generate", {}):
                break
            await asyncio.wait_for(script.eof_seen.wait(), 2)  # the server sees the client leave
            assert server.http.idle == []
        finally:
            await server.aclose()


async def test_errors_become_server_errors_with_their_status_and_message():
    refusal = b'HTTP/1.1 404 Not Found\r\nContent-Length: 32\r\n\r\n{"error":"model \'x\' not found"}  '
    script = ScriptedServer([refusal])
    async with script as url:
        server = OllamaClient(url)
        try:
            with pytest.raises(Exception) as caught:
                await server._request("POST", "/api/generate", {})
        finally:
            await server.aclose()
    assert caught.value.status == 404 and caught.value.message == "model 'x' not found"


async def test_a_server_that_stops_answering_is_a_timeout_and_none_listening_is_unreachable():
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    listener = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    server = OllamaClient(f"127.0.0.1:{port}", timeout=0.2)
    try:
        with pytest.raises(ServerTimeout, match="within 0.2 s"):
            await server._request("GET", "/api/version")
    finally:
        await server.aclose()
        listener.close()
    await listener.wait_closed()
    gone = OllamaClient(f"127.0.0.1:{port}")
    with pytest.raises(ServerUnreachable):
        await gone._request("GET", "/api/version")


def test_the_url_gives_host_port_prefix_and_scheme():
    plain = Transport("http://127.0.0.1:11434", 1, 1)
    assert (plain.host, plain.port, plain.prefix, plain.tls) == ("127.0.0.1", 11434, "", False)
    secure = Transport("https://ollama.example/base/", 1, 1)
    assert (secure.host, secure.port, secure.prefix, secure.tls) == ("ollama.example", 443, "/base", True)
    ipv6 = Transport("http://[::1]:8080", 1, 1)
    assert (ipv6.host, ipv6.port, ipv6.authority) == ("::1", 8080, b"[::1]:8080")
