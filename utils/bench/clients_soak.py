"""The mixed-client soak (`cli.py bench-soak --mixed`): clients that disagree about `num_ctx`, on one model.

Each client streams chat answers with its own `num_ctx` at its own pace, as real clients do (aider sends 9200, Open
WebUI 2048, most clients none), asks `/api/show` before each answer and again at its first chunk (as
litellm does), and `/api/tags` between answers. The server must never cut one client's answer for
another's request: every answer must end with `stop` or at its own `num_predict`. A client whose
`num_ctx` differs from the loaded one makes the server reload the model, which waits until the
answers in flight end: the soak counts those reloads (answers whose `load_duration` is a load) and
the waiting they caused (their time to the first chunk, beside the others').
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

CONTEXTS = (None, 2048, 3072, 9200)  # a client without num_ctx (the Modelfile's or 4096), Open WebUI, ..., aider
QUESTIONS = [
    "Write a Python function that reverses a string.",
    "Explain what a hash map is in two sentences.",
    "List three prime numbers and say why each is prime.",
    "Rewrite this line with a list comprehension: out = []; for x in xs: out.append(x * 2)",
]
PAUSE_SECONDS = 4.0  # the most a client waits before its next answer
RELOAD_SECONDS = 0.05  # a load_duration this long is a load (a model already loaded reports 0)


@dataclass
class MixedTally:
    answers: int = 0
    cut: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    first_chunk: list[float] = field(default_factory=list)  # seconds, answers that found the model loaded
    reload_first_chunk: list[float] = field(default_factory=list)  # seconds, answers that (re)loaded it
    shows: int = 0


async def _show(http: httpx.AsyncClient, model: str, tally: MixedTally) -> None:
    tally.shows += 1
    reply = await http.post("/api/show", json={"model": model})
    if reply.status_code != 200:
        tally.failures.append(f"/api/show: {reply.status_code} {reply.text[:200]}")


async def _answer(http: httpx.AsyncClient, model: str, num_ctx: int | None, num_predict: int, question: str,
                  tally: MixedTally) -> None:
    options: dict[str, Any] = {"temperature": 0, "num_predict": num_predict}
    if num_ctx:
        options["num_ctx"] = num_ctx
    body = {"model": model, "messages": [{"role": "user", "content": question}], "stream": True, "options": options}
    started, first, last, showing = time.monotonic(), None, None, None
    async with http.stream("POST", "/api/chat", json=body) as reply:
        if reply.status_code != 200:
            tally.failures.append(f"/api/chat: {reply.status_code} {(await reply.aread())[:200]!r}")
            return
        async for line in reply.aiter_lines():
            if not line.strip():
                continue
            message = json.loads(line)
            if first is None:
                first = time.monotonic() - started
                showing = asyncio.create_task(_show(http, model, tally))  # litellm, at the first chunk
            if "error" in message:
                tally.failures.append(f"/api/chat: error line {message['error'][:200]}")
            if message.get("done"):
                last = message
    if showing is not None:
        await showing
    tally.answers += 1
    reason, count = (last or {}).get("done_reason"), (last or {}).get("eval_count")
    if last is None or not (reason == "stop" or (reason == "length" and count == num_predict)):
        tally.cut.append(f"num_ctx {num_ctx}: done_reason {reason!r} after {count} of {num_predict} tokens")
    reloaded = (last or {}).get("load_duration", 0) / 1e9 >= RELOAD_SECONDS
    (tally.reload_first_chunk if reloaded else tally.first_chunk).append(first or 0.0)


async def _client(http: httpx.AsyncClient, model: str, num_ctx: int | None, answers: int, deadline: float,
                  rng: random.Random, tally: MixedTally) -> None:
    for _ in range(answers):
        await asyncio.sleep(rng.uniform(0, PAUSE_SECONDS))  # clients come and go, each at its own pace
        if time.monotonic() >= deadline:
            return
        await _show(http, model, tally)
        await _answer(http, model, num_ctx, rng.randint(8, 48), rng.choice(QUESTIONS), tally)
        if (await http.get("/api/tags")).status_code != 200:
            tally.failures.append("/api/tags failed")


async def mixed_soak(url: str, model: str, answers: int, time_limit: float, seed: int = 0) -> dict[str, Any]:
    """`answers` streamed answers in all (at most), from one client per entry of CONTEXTS at once."""
    tally = MixedTally()
    rng = random.Random(seed)
    deadline = time.monotonic() + time_limit
    started = time.monotonic()
    each = -(-answers // len(CONTEXTS))
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600, connect=10)) as http:
        await asyncio.gather(*(_client(http, model, num_ctx, each, deadline, random.Random(rng.random()), tally)
                               for num_ctx in CONTEXTS))
    return {"answers": tally.answers, "cut": tally.cut, "failures": tally.failures, "shows": tally.shows,
            "reloads": len(tally.reload_first_chunk), "first_chunk": tally.first_chunk,
            "reload_first_chunk": tally.reload_first_chunk, "seconds": time.monotonic() - started}


def mixed_report(result: dict[str, Any], proxied: bool = False) -> int:
    def median(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} s (max {max(values):.2f})" if values else "none"

    print(f"answers: {result['answers']} in {result['seconds']:.0f} s, /api/show calls: {result['shows']}, "
          f"clients' num_ctx: {', '.join(str(c or 'none') for c in CONTEXTS)}")
    print(f"cut answers: {len(result['cut'])}; failures: {len(result['failures'])}")
    for problem in (result["cut"] + result["failures"])[:20]:
        print(f"  {problem}")
    print(f"reloads: {result['reloads']}; time to the first chunk: {median(result['reload_first_chunk'])} "
          f"when the answer reloaded the model (waiting for the answers in flight, then loading), "
          f"{median(result['first_chunk'])} otherwise")
    if proxied:
        print("  (through the proxy, the answers it speculates report no load_duration: it cannot see the "
              "server's loads, so their reloads count as 'otherwise')")
    return 0 if not result["cut"] and not result["failures"] and result["answers"] else 1
