"""The NDJSON stream's framing: a stream that marks its last line ends in that line's own message."""

from __future__ import annotations

import asyncio

from utils.api.http import LastLine, ndjson_response


def _messages(lines: list[bytes]) -> list[dict]:
    sent: list[dict] = []

    async def body():
        for line in lines:
            yield line

    async def receive() -> dict:
        await asyncio.sleep(3600)  # the client never leaves
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"spec_version": "2.4"}}
    asyncio.run(ndjson_response(body())(scope, receive, send))
    return sent


def test_the_marked_last_line_ends_the_response_in_one_message():
    sent = _messages([b'{"done":false}\n', LastLine(b'{"done":true}\n')])
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body", "http.response.body"]
    assert [(m["body"], m["more_body"]) for m in sent[1:]] == [
        (b'{"done":false}\n', True), (b'{"done":true}\n', False)]


def test_an_unmarked_stream_still_ends_with_an_empty_message():
    sent = _messages([b'{"status":"success"}\n'])
    assert [(m["body"], m["more_body"]) for m in sent[1:]] == [(b'{"status":"success"}\n', True), (b"", False)]
