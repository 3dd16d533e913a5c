"""A speculated streamed `/v1/messages` answer is kept alive while its long prompt is read, as a
standard one is (tests/test_long_prompts.py): message_start and pings before the first content block,
so that Claude Code, whose read timeout is 5 minutes, does not give up on a long agent prompt.

One server of its own with speculation on (`cli.py serve`'s default, 'suffix' for every model),
smollm2:135m, a system prompt of about 1,700 tokens (some seconds to read on 2 cores).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import pytest

from tests.support.own_server import own_server

MODEL = "smollm2:135m"
READ = re.compile(r"prompt of (\d+) tokens: (\d+) cached, (\d+) to read")


def rules(count: int, seed: str) -> str:
    """About 42 tokens a line: a long system prompt, as an agent's, unique to `seed` (no cache hit)."""
    return f"Session {seed}.\n" + "".join(
        f"Rule {i}: the file src/module_{i}.py keeps the parser for format {i * 7}; never edit it "
        f"without running tests/test_{i}.py first.\n" for i in range(count))


def speculated(url: str) -> int:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    found = re.search(r'^spec_proxy_requests_total\{endpoint="/v1/messages",mode="speculative"} (\d+)', text, re.M)
    return int(found.group(1)) if found else 0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    folder = tmp_path_factory.mktemp("speculated-pings")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OLLAMA_CONTEXT_LENGTH", "2560")
        with own_server(folder, (MODEL,), speculation=True) as url:
            yield url, folder / "server.log"


def test_a_speculated_messages_stream_pings_while_its_prompt_is_read(served: tuple[str, Path]) -> None:
    url, log = served
    client = anthropic.Anthropic(base_url=url, api_key="ollama", max_retries=0)
    before, seen = speculated(url), log.stat().st_size
    with client.messages.with_streaming_response.create(
            model=MODEL, max_tokens=8, stream=True, system=rules(40, uuid.uuid4().hex),
            messages=[{"role": "user", "content": "Which file keeps format 70?"}]) as response:
        events = [line.removeprefix("event: ") for line in response.iter_lines() if line.startswith("event: ")]
    read = [int(m[2]) for m in READ.findall(log.read_bytes()[seen:].decode(errors="replace"))]
    assert read and read[-1] > 1500  # a long prompt was read ...
    assert speculated(url) == before + 1  # ... for a speculated answer ...
    first_content = next(i for i, kind in enumerate(events) if kind.startswith("content_block"))
    assert events[:2] == ["message_start", "ping"]  # ... and the client heard from the server meanwhile
    assert set(events[1:first_content]) == {"ping"}
    assert events.count("message_start") == 1 and events[-1] == "message_stop"
