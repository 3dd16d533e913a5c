"""`POST /speculative/burst`: a validator's K+1 one-token requests in one HTTP request.

Over HTTP each nested request costs its own parsing, routing, JSON and round trip: about 2-3 ms
apiece on an H100 machine's CPU, more than verifying a drafted token costs on its GPU. A validator
that finds `"burst_endpoint": true` in `/api/version` sends its burst here instead: a list of
ordinary `/api/generate` bodies (raw, not streamed, `num_predict` 1), answered with the list of what
`/api/generate` would answer to each, from the same runner path (one announced burst, so one
evaluation). Any other Ollama gets the K+1 requests (utils/engine/client.py).
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from utils.api.http import ApiError, json_response
from utils.api.schemas import GenerateBody
from utils.burst import new_id
from utils.embedded.http.answer import collect, job_for
from utils.embedded.http.state import state_of
from utils.embedded.http.text import TextAssembler

PATH = "/speculative/burst"
MAX_REQUESTS = 64

router = APIRouter()  # included by api.create_app; `burst` is also on the direct path (utils/api/direct.py)


class BurstBody(BaseModel):
    requests: list[GenerateBody] = Field(min_length=1, max_length=MAX_REQUESTS)


@router.post(PATH)
async def burst(body: BurstBody, request: Request) -> Response:
    first = body.requests[0]
    for each in body.requests:
        each.check()
        if each.model != first.model:
            raise ApiError("every request of a burst must name the same model", 400)
        if each.options.num_ctx != first.options.num_ctx:
            raise ApiError("every request of a burst must use the same num_ctx", 400)
        if not each.raw or each.stream or each.options.num_predict != 1 or not each.prompt:
            raise ApiError("a burst holds raw, non-streamed requests with num_predict 1 and a prompt", 400)
        # `think: false` (what the engine sends) leaves raw output as it is; anything else is /api/generate's.
        extra = {name for name, value in (each.model_extra or {}).items() if (name, value) != ("think", False)}
        if each.format is not None or each.suffix or extra:
            raise ApiError("a burst request has fields only /api/generate serves: "
                           f"{sorted({*extra, *(['format'] if each.format else [])})}", 400)
    runner, load = await state_of(request).models.get(first.model, first.options.num_ctx, first.keep_alive)
    announced = (new_id(), len(body.requests))
    jobs = []
    for each in body.requests:
        each.options = each.options.under(runner.parameters)
        job = job_for(each, each.prompt)
        job.burst = announced  # evaluated together (runtime/bursts.py), submitted in this order
        jobs.append(job)
    answers = await asyncio.gather(*(
        collect(request, runner, each, job, TextAssembler(each.options.stops()), load, chat=False)
        for each, job in zip(body.requests, jobs)
    ))
    return json_response({"responses": answers})
