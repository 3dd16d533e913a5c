"""The engine's target interface (utils/engine/target.py) and its two implementations: the HTTP
client of any Ollama, and the embedded server's in-process target (`cli.py serve`). Each must offer
every member of `Target` with the same parameters, so that the engine runs unchanged on either."""

from __future__ import annotations

import inspect

import pytest

from utils.engine.client import OllamaClient
from utils.engine.target import Target

MEMBERS = sorted(name for name, value in vars(Target).items() if inspect.isfunction(value) and not name.startswith("_"))


def implementations() -> list[type]:
    from utils.embedded.http.target import InProcessTarget

    return [OllamaClient, InProcessTarget]


def test_the_interface_names_what_the_engine_asks() -> None:
    assert {"next_tokens", "next_token", "stream_raw", "render_chat", "show", "stream_answer",
            "exact_logprobs", "aclose"} <= set(MEMBERS)
    assert set(Target.__annotations__) == {"url", "described", "drains", "constrains"}


@pytest.mark.parametrize("name", MEMBERS)
def test_each_implementation_has_the_member_with_its_parameters(name: str) -> None:
    wanted = inspect.signature(getattr(Target, name))
    for implementation in implementations():
        member = getattr(implementation, name, None)
        assert member is not None, f"{implementation.__name__} has no {name}"
        got = inspect.signature(member)
        assert list(got.parameters) == list(wanted.parameters), f"{implementation.__name__}.{name}"
        assert [p.default for p in got.parameters.values()] == [p.default for p in wanted.parameters.values()]
        # A coroutine where the interface awaits, an async generator where it iterates, a plain function
        # where it enters what the member gives (`async with target.hold(...)`).
        kind = inspect.isasyncgenfunction(member), inspect.iscoroutinefunction(member)
        streams = "AsyncIterator" in str(wanted.return_annotation)
        enters = "ContextManager" in str(wanted.return_annotation)
        expected = (False, False) if enters else (streams, not streams)
        assert kind == expected, f"{implementation.__name__}.{name}"


def test_each_implementation_names_its_server_and_says_whether_it_drains() -> None:
    from utils.embedded.http.target import URL, InProcessTarget

    assert InProcessTarget.url == URL and OllamaClient("127.0.0.1:1").url == "http://127.0.0.1:1"
    assert InProcessTarget.drains is True and OllamaClient.drains is False  # over HTTP a stream can only close
    assert InProcessTarget.constrains is True and OllamaClient.constrains is False  # a grammar resumes in process


@pytest.mark.parametrize("headers, off", [
    ({"x-speculation": "off"}, True), ({"x-speculation": " OFF "}, True), ({"x-speculation": "on"}, False),
    ({}, False), ([(b"x-speculation", b"off")], True), ([(b"x-speculation", b"no")], False), ([], False),
])
def test_a_request_opts_out_of_speculation_with_one_header(headers, off) -> None:
    from utils.burst import opted_out

    assert opted_out(headers) is off
