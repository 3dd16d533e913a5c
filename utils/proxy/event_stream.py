"""An answer's engine events, streamed to a client that asks for them (`X-Speculation-Events: on`).

The app's Chat and Compare pages draw every round (highlights, live charts, the draft length the
controller chose), so against `cli.py serve` they ask the server to run the engine in process and
send its events, one `{"speculative_event": {...}}` line each (utils/engine/events.py `to_wire`),
instead of running the engine themselves over HTTP, which pays requests every round. The app's
settings for the answer travel as headers, and each is applied or refused, never ignored:

    X-Speculation-Events: on
    X-Speculation-Drafter: suffix | lookup | none | <a draft model>   (default: the model's pair, else none)
    X-Speculation-K: <0-16>               (default: the controller's choice, or the server's --k)
    X-Speculation-P-Min: <0-1>            (default: the server's)
    X-Speculation-Draft-Top-K: <1-20>     (default: the server's)

Every answer is the engine's then, standard ones too (drafter `none`, a thinking model, `format`, an
answer the controller keeps standard), so that each carries its statistics; what the engine does not
answer (images, options it does not keep exact) is refused with a 400 and the reason, as is
a request that is not streamed. A failure after the first line ends the stream with Ollama's
`{"error": ...}` line, with the status the error would have had.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from starlette.responses import Response, StreamingResponse

from utils.api.http import NDJSON, json_response, ndjson_line
from utils.burst import DRAFT_K, DRAFT_TOP_K, DRAFTER, P_MIN
from utils.engine.config import K_LIMIT, EngineConfig
from utils.engine.drafters import NONE
from utils.engine.events import DoneEvent, Event, GenerationError, to_wire
from utils.errors import SpecError
from utils.proxy.routing import Speculation, plan
from utils.proxy.serving import ProxyState


@dataclass
class Asked:
    """What the headers ask of the answer."""

    drafter: str | None  # None: the model's pair, else standard
    k: int | None
    engine: EngineConfig


def asked(headers: Mapping[str, str], engine: EngineConfig) -> Asked:
    """The answer's settings from its headers; ValueError with a sentence for one that is not valid."""
    drafter = headers.get(DRAFTER, "").strip() or None
    k_text = headers.get(DRAFT_K, "").strip()
    if k_text and not (k_text.isdigit() and int(k_text) <= K_LIMIT):
        raise ValueError(f"X-Speculation-K must be a whole number from 0 to {K_LIMIT}, not {k_text!r}")
    try:
        p_min = float(headers[P_MIN]) if P_MIN in headers else None
        top_k = int(headers[DRAFT_TOP_K]) if DRAFT_TOP_K in headers else None
        engine = engine.replace(p_min=p_min, draft_top_k=top_k)
    except (ValueError, ValidationError) as error:
        raise ValueError(f"X-Speculation-P-Min (0 to 1) or X-Speculation-Draft-Top-K (1 to 20) is not valid: "
                         f"{error}") from None
    return Asked(drafter, int(k_text) if k_text else None, engine)


async def event_answer(state: ProxyState, body: Any, chat: bool, headers: Mapping[str, str], client: str,
                       endpoint: str) -> Response:
    """The engine's events for one /api/generate or /api/chat body, streamed; or the refusal."""
    try:
        wanted = asked(headers, state.config.engine)
    except ValueError as error:
        return json_response({"error": str(error)}, 400)
    model = body.get("model") if isinstance(body, dict) else None
    drafter = wanted.drafter or (state.config.pairs.get(model, NONE) if isinstance(model, str) else NONE)
    k = wanted.k if wanted.k is not None else state.config.k
    job = plan(body, chat, {model: drafter} if isinstance(model, str) else {}, k)
    if not isinstance(job, Speculation):
        return json_response({"error": f"X-Speculation-Events: the engine cannot make this answer ({job.reason}); "
                                       "ask without the header for the server's own answer"}, 400)
    if not job.stream:
        return json_response({"error": "X-Speculation-Events needs a streamed answer (stream: true)"}, 400)
    try:
        decoder = await state.decoder(job.model, drafter, wanted.engine)
        stream = decoder.stream(job.request)
        first = await anext(stream)
    except SpecError as error:  # a GenerationError has its cause's status
        return json_response({"error": error.message}, error.status or 500)

    async def lines() -> AsyncIterator[bytes]:
        event: Event = first
        try:
            while True:
                yield ndjson_line({"speculative_event": to_wire(event)})
                if isinstance(event, DoneEvent):
                    state.answered(job, client, endpoint, event.stats)
                event = await anext(stream)
        except StopAsyncIteration:
            return
        except GenerationError as error:
            yield ndjson_line({"error": error.message, "status": error.status or 500})
        finally:  # a client that left (the app's Stop): the engine's streams close, and the slot is freed
            await stream.aclose()

    return StreamingResponse(lines(), media_type=NDJSON)
