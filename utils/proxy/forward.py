"""Pass-through to the upstream Ollama: method, path, query, headers and body as the client sent
them; status, headers and body bytes as upstream answered, streamed as they come. Closing the
client's connection closes the upstream one, which stops upstream's work."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from utils.api.http import replay

# Hop-by-hop headers (RFC 9110 7.6.1) and the ones httpx sets itself.
_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
        "transfer-encoding", "upgrade", "host", "content-length"}


def _headers(headers: Mapping[str, str], drop: set[str]) -> dict[str, str]:
    return {key: value for key, value in headers.items() if key.lower() not in _HOP | drop}


async def forward(request: Request, upstream: httpx.AsyncClient, body: bytes | None = None,
                  drop_headers: frozenset[str] = frozenset()) -> Response:
    """Send `request` upstream (with `body` if already read) and stream the answer back."""
    content: bytes | AsyncIterator[bytes] = body if body is not None else request.stream()
    outgoing = upstream.build_request(request.method, request.url.path, params=request.query_params,
                                      headers=_headers(request.headers, set(drop_headers)), content=content)
    try:
        response = await upstream.send(outgoing, stream=True)
    except httpx.TimeoutException:
        return Response(b'{"error":"the upstream Ollama did not answer in time"}', 504,
                        media_type="application/json")
    except httpx.TransportError as error:
        message = f"cannot reach the upstream Ollama at {upstream.base_url}: {error or type(error).__name__}"
        return Response(httpx.Response(502, json={"error": message}).content, 502, media_type="application/json")
    return StreamingResponse(response.aiter_raw(), status_code=response.status_code,
                             headers=_headers(response.headers, set()), background=BackgroundTask(response.aclose))


class Inner(Response):
    """The answer of the embedded server's own stack (front.py), in process: the request handed down
    as it came (its body replayed if the front read it), the answer streamed up as it is made."""

    def __init__(self, app: ASGIApp, body: bytes | None):
        super().__init__()
        self.app, self.read = app, body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive if self.read is None else replay(self.read, receive), send)
