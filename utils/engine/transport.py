"""HTTP/1.1 for the engine's requests: keep-alive connections to one server, a body in, bytes out.

A speculative round makes two requests or more (a draft, a validator burst) for a few tokens, so a
client's own Python is paid every few tokens. aiohttp's was about 0.4 ms a request on a 2-core CPU,
a third of what a one-token request cost outside the engine (1.38 ms against 0.98 ms over a bare
socket, `cli.py bench-overhead`'s requests); httpx's more. What the engine needs is small: requests
to one server with a JSON body, answers with a Content-Length or chunked (Ollama's streams), and
early closing of a stream (which tells the server to stop generating). That is all this module does;
everything else (the app, the proxy) keeps httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar
from urllib.parse import urlsplit

T = TypeVar("T")
MAX_IDLE = 32  # kept-alive connections; a validator burst to a plain Ollama uses K+1 at once


class ConnectTimeout(TimeoutError):
    """No connection within the connect time limit."""


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        try:
            self.writer.close()
        except RuntimeError:  # its event loop is closed already
            return
        if self.reader.exception() is None:
            return
        # A connection the server reset keeps that error on the stream's "closed" future too, which
        # asyncio would log as never retrieved: wait for it (and drop it) in the background.
        try:
            asyncio.get_running_loop().create_task(_closed(self.writer))
        except RuntimeError:  # closed from outside its loop: nothing to wait with
            pass


async def _closed(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        await writer.wait_closed()


class Response:
    """A response whose body has not been read yet. Read to its end, its connection goes back to the
    pool; closed before (`close`), the connection is closed, and the server sees the client leave."""

    def __init__(self, transport: Transport, connection: Connection, status: int, headers: dict[bytes, bytes]):
        self.transport, self.status = transport, status
        self.connection: Connection | None = connection  # None once given back or closed
        self.chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        length = headers.get(b"content-length")
        self.left = int(length) if length is not None and not self.chunked else None
        self.reusable = headers.get(b"connection", b"").lower() != b"close" and (self.chunked or self.left is not None)
        self.finished = False

    async def pieces(self) -> AsyncIterator[bytes]:
        """The body as it arrives (chunked transfer decoded)."""
        assert self.connection is not None, "the body was already read or the response closed"
        reader, within = self.connection.reader, self.transport.within
        try:
            if self.chunked:
                while size := int((await within(reader.readuntil(b"\r\n"))).split(b";")[0], 16):
                    yield (await within(reader.readexactly(size + 2)))[:-2]
                while await within(reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
            elif self.left is not None:
                while self.left > 0:
                    data = await within(reader.read(min(self.left, 1 << 16)))
                    if not data:
                        raise ConnectionError("the server closed the connection in the middle of an answer")
                    self.left -= len(data)
                    yield data
            else:  # the body ends with the connection
                self.reusable = False
                while data := await within(reader.read(1 << 16)):
                    yield data
            self.finished = True
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError) as error:
            raise ConnectionError("the server closed the connection in the middle of an answer") from error
        finally:
            self.close()

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self.pieces()])

    def close(self) -> None:
        connection, self.connection = self.connection, None
        if connection is None:
            return
        if self.finished and self.reusable:
            self.transport.release(connection)
        else:
            connection.close()


class Transport:
    """Keep-alive HTTP/1.1 connections to the server at `url` (http or https, with an optional path
    prefix). Each wait for the server's next bytes is limited to `read_timeout` seconds."""

    def __init__(self, url: str, connect_timeout: float, read_timeout: float):
        parts = urlsplit(url)
        self.tls = parts.scheme == "https"
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or (443 if self.tls else 80)
        self.prefix, self.authority = parts.path.rstrip("/"), parts.netloc.encode("idna")
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.idle: list[Connection] = []
        self.loop: asyncio.AbstractEventLoop | None = None

    async def within(self, waiting: Awaitable[T]) -> T:
        async with asyncio.timeout(self.read_timeout):
            return await waiting

    async def open(self, method: str, path: str, body: bytes | None = None,
                   headers: dict[str, str] | None = None) -> Response:
        """Send a request and read the response's head; the body is left to the caller."""
        request = self._request(method, path, body, headers)
        while True:
            connection, reused = await self._connection()
            try:
                connection.writer.write(request)
                return await self._head(connection)
            except (ConnectionError, asyncio.IncompleteReadError) as error:
                connection.close()
                # A kept-alive connection the server had closed meanwhile: the request never reached
                # it, so it is sent again on a new connection (once: a new one is not reused).
                if not reused or (isinstance(error, asyncio.IncompleteReadError) and error.partial):
                    raise ConnectionError(str(error) or "the server closed the connection") from None
            except BaseException:
                connection.close()
                raise

    def release(self, connection: Connection) -> None:
        try:
            same_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:  # no loop running: a response collected after its loop ended
            same_loop = False
        if len(self.idle) < MAX_IDLE and same_loop:
            self.idle.append(connection)
        else:
            connection.close()

    def close(self) -> None:
        for connection in self.idle:
            connection.close()
        self.idle.clear()

    def _request(self, method: str, path: str, body: bytes | None, headers: dict[str, str] | None) -> bytes:
        lines = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.authority.decode()}",
                 "Accept: application/json"]
        if body is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")

    async def _connection(self) -> tuple[Connection, bool]:
        loop = asyncio.get_running_loop()
        if loop is not self.loop:  # connections belong to the loop that opened them (tests run a loop each)
            self.idle, self.loop = [], loop
        while self.idle:
            connection = self.idle.pop()
            if not connection.reader.at_eof():
                return connection, True
            connection.close()
        try:
            async with asyncio.timeout(self.connect_timeout):
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, ssl=ssl.create_default_context() if self.tls else None)
        except TimeoutError:
            raise ConnectTimeout(f"no connection within {self.connect_timeout:g} s") from None
        return Connection(reader, writer), False

    async def _head(self, connection: Connection) -> Response:
        while True:
            head = await self.within(connection.reader.readuntil(b"\r\n\r\n"))
            status_line, *lines = head[:-4].split(b"\r\n")
            status = int(status_line.split(b" ", 2)[1])
            if status >= 200:  # 1xx: an interim answer, the real one follows
                break
        headers: dict[bytes, bytes] = {}
        for line in lines:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        return Response(self, connection, status, headers)
