"""Shared by the bad-input tests (tests/test_bad_input*.py): hostile model names, and the check that
the server still serves after bad input."""

from __future__ import annotations

import httpx

from tests.support.models import SMALL

HOSTILE_NAMES = [
    "", "   ", "nosuch:1b", "../../etc/passwd", "smollm2:135m/../x", "/etc/passwd", "..", "./smollm2:135m",
    "smollm2:135m/", "smollm2:135m\x00", "..\\..\\windows\\win.ini", "%2e%2e%2fetc%2fpasswd", "~/x",
    "smollm2:135m:latest", "a" * 300, "smollm2:135m\nx",
]


async def still_serving(url: str) -> None:
    """The server answers a real generation after the bad input."""
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        reply = await http.post("/api/generate", json={"model": SMALL, "prompt": "Hi", "stream": False,
                                                       "options": {"num_predict": 2, "temperature": 0}})
    assert reply.status_code == 200 and reply.json()["done"], reply.text
