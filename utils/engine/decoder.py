"""The decoding loop: standard or speculative generation from a target model, as a stream of events.

One round of speculation: the controller picks K; the drafter proposes up to K pieces; the validator
asks the target for its own token at every position at once; the accepted pieces and the target's
token after them are emitted. K = 0 rounds are standard generation segments. Any drafter or
validator failure ends speculation for the answer, which goes on by standard generation from exactly
where it was: nothing is emitted that the target did not choose, so nothing is lost or repeated.

Everything above this module (CLI, chat page, charts, store, benchmarks) consumes the events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import numpy as np

from config import Settings
from utils.engine.client import OllamaServer, ServerError
from utils.engine.controller import DraftLengthController, controller_for
from utils.engine.drafters.base import Drafter
from utils.sampling import SamplingOptions
from utils.engine.events import DoneEvent, Event, FallbackEvent, GenerationError, RoundEvent, TextEvent
from utils.engine.output import Output
from utils.engine.request import GenerationRequest
from utils.engine.stats import AnswerStats, Fallback, RoundRecord
from utils.engine.validator import PromptPrefixValidator, choose_method

SHORT_SEGMENT_TOKENS = 4  # after an empty draft: a few tokens, then try drafting again


class SpeculativeDecoder:
    """Generates from `target_model` on `target`, speculatively when `drafter` is given."""

    def __init__(self, target: OllamaServer, target_model: str, drafter: Drafter | None, settings: Settings,
                 *, same_tokenizer: bool = False):
        self.target, self.target_model, self.drafter = target, target_model, drafter
        self.settings, self.same_tokenizer = settings, same_tokenizer
        self.validator = PromptPrefixValidator(target, target_model, settings.num_ctx)

    async def raw_prompt(self, request: GenerationRequest) -> str:
        if request.raw:
            return request.prompt
        messages = list(request.messages or [])
        if request.messages is None:
            messages = ([{"role": "system", "content": request.system}] if request.system else [])
            messages.append({"role": "user", "content": request.prompt})
        return await self.target.render_chat(self.target_model, messages, self.settings.num_ctx)

    async def stream(self, request: GenerationRequest) -> AsyncIterator[Event]:
        started = time.perf_counter()
        options = request.sampling
        method = choose_method(options, self.same_tokenizer) if self.drafter else None
        stats = AnswerStats(mode="speculative" if self.drafter else "standard", target=self.target_model,
                            drafter=self.drafter.name if self.drafter else None, method=method)
        output = Output(request.stop, request.max_tokens)
        try:
            prompt = await self.raw_prompt(request)
        except ServerError as error:
            raise GenerationError(error.message, "") from None
        drafter = self.drafter
        controller = controller_for((self.target.url, self.target_model, drafter and drafter.name, method),
                                    self.settings.k_max, request.k)
        rng = np.random.default_rng(request.seed)
        context_tokens = 0  # the target's count for the context, as its last answer reported
        short_segment = False  # the last round emitted nothing: generate a few tokens normally
        resume_seed: int | None = None  # sample-match: draw the next standard token with this seed

        def emitted(events: list[TextEvent]) -> list[TextEvent]:
            if events and stats.time_to_first_token_s is None:
                stats.time_to_first_token_s = time.perf_counter() - started
            return events

        while output.done_reason is None:
            context = prompt + output.generated
            room = self.settings.num_ctx - (context_tokens + output.tokens) - 2 if context_tokens else None
            limit = min(output.remaining - 1, room if room is not None else 1 << 30)
            k = 0 if drafter is None or short_segment else controller.choose(limit)
            if k == 0:
                tokens = output.remaining if drafter is None else (SHORT_SEGMENT_TOKENS if short_segment
                                                                    else controller.segment_tokens())
                async for event in self._standard(context, output, options, tokens, rng, resume_seed,
                                                  controller, stats, started):
                    yield emitted([event])[0] if isinstance(event, TextEvent) else event
                short_segment, resume_seed = False, None
                continue
            try:
                round_started = time.perf_counter()
                draft_options = _draft_options(options, method, rng)
                draft = await asyncio.wait_for(drafter.propose(context, k, draft_options),
                                               self.settings.draft_timeout)
                drafted_at = time.perf_counter()
                if not draft.pieces:  # nothing to verify: a short standard segment, then draft again
                    controller.record_round(k, 0, 0, drafted_at - round_started, 0.0)
                    short_segment = True
                    continue
                verdict = await asyncio.wait_for(self.validator.verify(context, draft, options, method, rng),
                                                 self.settings.verify_timeout)
            except (ServerError, asyncio.TimeoutError, OSError) as error:
                reason = _describe(error, drafter.name)
                stats.fallbacks.append(Fallback(at_token=output.tokens, reason=reason))
                drafter = None
                yield FallbackEvent(reason)
                continue
            verified_at = time.perf_counter()
            drafter.update(draft, verdict.accepted)
            controller.record_round(k, len(draft), verdict.accepted, drafted_at - round_started,
                                    verified_at - drafted_at)
            context_tokens = verdict.prompt_tokens - output.tokens
            before = output.tokens
            for text, origin in verdict.pieces:
                for event in emitted(output.add(text, origin)):
                    yield event
                if origin == "correction":
                    stats.correction_tokens += 1
                elif origin == "bonus":
                    stats.bonus_tokens += 1
                if output.done_reason:
                    break
            if verdict.ended and output.done_reason is None:
                for event in emitted(output.end("stop")):
                    yield event
            record = RoundRecord(k=k, drafted=len(draft), accepted=verdict.accepted, emitted=output.tokens - before,
                                 seconds=verified_at - round_started, at_seconds=verified_at - started)
            stats.add_round(record)
            stats.draft_seconds += drafted_at - round_started
            stats.verify_seconds += verified_at - drafted_at
            yield RoundEvent(record)
            if not verdict.pieces and not verdict.ended:
                short_segment, resume_seed = True, verdict.resume_seed

        stats.done_reason = output.done_reason or "stop"
        stats.output_tokens = output.tokens
        stats.finish(time.perf_counter() - started)
        yield DoneEvent(output.text, stats)

    async def _standard(self, context: str, output: Output, options: SamplingOptions, tokens: int,
                        rng: np.random.Generator, resume_seed: int | None, controller: DraftLengthController,
                        stats: AnswerStats, started: float) -> AsyncIterator[Event]:
        """Standard generation of about `tokens` tokens from `context` (exactly what the target writes).

        It reads on past `tokens` only to finish a character split over tokens, then closes the stream.
        """
        request = {"temperature": options.temperature, "top_k": options.top_k, "top_p": options.top_p,
                   "min_p": options.min_p, "num_ctx": self.settings.num_ctx, "num_predict": output.remaining}
        if not options.greedy:
            request["seed"] = resume_seed if resume_seed is not None else int(rng.integers(0, 2**31 - 1))
        segment_started = time.perf_counter()
        first_token_at: float | None = None
        count = 0
        try:
            async for chunk in self.target.stream_raw(self.target_model, context, request):
                if chunk.tokens and first_token_at is None:
                    first_token_at = time.perf_counter()
                count += len(chunk.tokens)
                if chunk.text or chunk.tokens:
                    for event in output.add(chunk.text, "standard", len(chunk.tokens)):
                        yield event
                if chunk.done_reason is not None:
                    for event in output.end(chunk.done_reason):
                        yield event
                    break
                whole = not chunk.tokens or chunk.tokens[-1].complete
                if output.done_reason or (count >= tokens and whole):
                    break
        except ServerError as error:
            raise GenerationError(error.message, output.text) from None
        finished = time.perf_counter()
        if first_token_at is not None:
            controller.record_standard(count, finished - first_token_at)
        stats.standard_tokens += count
        stats.standard_seconds += finished - segment_started
        record = RoundRecord(k=0, emitted=count, seconds=finished - segment_started, at_seconds=finished - started)
        stats.add_round(record)
        yield RoundEvent(record)


def _draft_options(options: SamplingOptions, method: str | None, rng: np.random.Generator) -> dict:
    """Greedy and sample-match draft the most likely pieces; rejection sampling must draw them."""
    if method != "rejection":
        return {"temperature": 0}
    return {"temperature": options.temperature, "top_k": options.top_k, "top_p": options.top_p,
            "min_p": options.min_p, "seed": int(rng.integers(0, 2**31 - 1))}


def _describe(error: Exception, drafter: str) -> str:
    if isinstance(error, asyncio.TimeoutError):
        return f"the draft ({drafter}) or verification took too long; continuing without speculation"
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    return f"speculation failed ({drafter}): {message}; continuing without speculation"
