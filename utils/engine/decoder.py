"""The decoding loop: standard or speculative generation from a target model, as a stream of events.

Each turn of the loop is one named step: `_choose_k` asks the controller for a draft length; K = 0
is a `_standard_segment`, anything else a `_speculative_round` (the drafter proposes up to K pieces,
the validator asks the target for its own token at every position at once, the accepted pieces and
the target's token after them are emitted). Any drafter or validator failure ends speculation for
the answer, which goes on by standard generation from exactly where it was: nothing is emitted that
the target did not choose, so nothing is lost or repeated.

Everything above this module (CLI, chat page, charts, store, benchmarks) consumes the events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator

import numpy as np

from utils.burst import announce
from utils.engine.config import EngineConfig
from utils.engine.controller import DraftLengthController, controller_for
from utils.engine.drafters import Draft, Drafter, DraftSetup, build_drafter
from utils.engine.events import DoneEvent, Event, FallbackEvent, GenerationError, RoundEvent, TextEvent, ThinkingEvent
from utils.engine.model_info import loaded_context, model_info
from utils.engine.output import Output
from utils.engine.planning import FORMAT_REASON, NO_GAIN_REASON, Plan, standard_reason, verification_gate
from utils.engine.progress import RECENT_TOKENS, AnswerState
from utils.engine.request import GenerationRequest
from utils.engine.stats import AnswerStats, Fallback, RoundRecord
from utils.engine.target import Drain, ServerError, Target
from utils.engine.validator import PromptPrefixValidator, Verdict, choose_method
from utils.sampling import GREEDY

__all__ = ["FORMAT_REASON", "NO_GAIN_REASON", "SpeculativeDecoder", "build_decoder"]

# After an empty draft: a few tokens, then try drafting again; twice as many after each empty draft
# in a row (each segment is a request of its own), up to the controller's segment length.
SHORT_SEGMENT_TOKENS = 4


class SpeculativeDecoder:
    """Generates from `target_model` on `target`, speculatively when `drafter` is given."""

    def __init__(self, target: Target, target_model: str, drafter: Drafter | None, config: EngineConfig):
        self.target, self.target_model, self.drafter, self.config = target, target_model, drafter, config
        self.validator = PromptPrefixValidator(target, target_model)

    async def raw_prompt(self, request: GenerationRequest, think: bool | str | None = None) -> str:
        """The prompt as the target's template makes it, with the client's options and `think`."""
        if request.raw:
            return request.prompt
        messages = list(request.messages or [])
        if request.messages is None:
            messages = ([{"role": "system", "content": request.system}] if request.system else [])
            messages.append({"role": "user", "content": request.prompt})
        return await self.target.render_chat(self.target_model, messages, request.options, think)

    async def plan(self, request: GenerationRequest) -> Plan:
        """How an answer to `request` is made (planning.py): asked once per answer, before any text.

        Raises ServerError with the server's message (an unknown model, an unreachable server)."""
        info = await model_info(self.target, self.target_model, self.target.described)
        sampling, stops = info.sampling(request.options), info.stops(request.options)
        if why := standard_reason(info, request.format, request.think, self.target.constrains):
            return Plan(info, sampling, stops, code=why[0], reason=why[1], thinking=why[0] == "thinking")
        if self.drafter is None:
            return Plan(info, sampling, stops)
        if gate := await verification_gate(self.target, info, request.raw_options):
            return Plan(info, sampling, stops, code="server", reason=gate)
        # Under a grammar the top log-probabilities are not what is sampled from: sample-match, not rejection.
        exact = self.drafter.exact_distribution and await self.target.exact_logprobs() and request.format is None
        method = choose_method(sampling, exact)
        controller = self._controller(method, request.k)
        if controller.start_answer(leaving_segment=not self.target.drains):
            return Plan(info, sampling, stops, method, code="no_gain", reason=NO_GAIN_REASON)
        return Plan(info, sampling, stops, method)

    async def stream(self, request: GenerationRequest, plan: Plan | None = None) -> AsyncGenerator[Event, None]:
        """The answer's events; `plan`: the one `plan(request)` gave, if the caller already asked. The
        target keeps its model as the answer loads it until the answer ends (Target.hold)."""
        async with self.target.hold(self.target_model, request.options) as load:
            answer = await self._start(request, plan or await self._planned(request))
            answer.stats.load_seconds = load
            for fallback in answer.stats.fallbacks:  # generated standard from the start: say why at once
                yield FallbackEvent(fallback.reason)
            if answer.plan.thinking:
                async for event in self._thinking_answer(answer):
                    yield event
            while answer.output.done_reason is None:
                k = self._choose_k(answer)
                steps = self._standard_segment(answer) if k == 0 else self._speculative_round(answer, k)
                async for event in steps:
                    yield event
            yield await self._done(answer)

    # -- the steps -----------------------------------------------------------------------------------

    def _controller(self, method: str | None, k: int | None) -> DraftLengthController:
        """The controller of answers verified by `method`: one per (server, target, drafter, method),
        shared by the answers in this process."""
        key = (self.target.url, self.target_model, self.drafter and self.drafter.name, method)
        return controller_for(key, self.config.k_max, k, free=self.drafter is not None and self.drafter.free)

    async def _planned(self, request: GenerationRequest) -> Plan:
        try:
            return await self.plan(request)
        except ServerError as error:
            raise GenerationError.of(error, "") from None

    async def _start(self, request: GenerationRequest, plan: Plan) -> AnswerState:
        asked = self.drafter
        think = request.think
        if plan.info.thinks and not plan.thinking:
            think = False  # speculated or standard, the prompt is rendered with thinking off, as asked
        try:
            prompt = "" if plan.thinking else await self.raw_prompt(request, think)
            # The context the target is loaded with (the prompt's request loaded it), else its Modelfile's.
            limit = None if plan.thinking else (await loaded_context(self.target, self.target_model)
                                                or plan.info.parameters.get("num_ctx"))
        except ServerError as error:
            raise GenerationError.of(error, "") from None
        # An answer the controller keeps standard is still a speculative answer that drafted nothing.
        stats = AnswerStats(mode="speculative" if plan.method else "standard", target=self.target_model,
                            drafter=asked.name if asked else None, method=plan.method)
        if asked is not None and plan.reason is not None:
            stats.fallbacks.append(Fallback(at_token=0, reason=plan.reason))
        return AnswerState(
            request=request, plan=plan, prompt=prompt, drafter=None if plan.standard else asked,
            controller=self._controller(plan.method, request.k), stats=stats, context_limit=limit,
            output=Output(plan.stops, request.max_tokens), rng=np.random.default_rng(plan.sampling.seed),
        )

    async def _thinking_answer(self, answer: AnswerState) -> AsyncIterator[Event]:
        """A thinking answer, made by upstream's own endpoint (the client's request as it is), so that
        `thinking` and the content are split exactly as for a direct request. The reasoning comes as
        ThinkingEvents; the content goes through the output like any standard text."""
        output = answer.output
        chat, body = answer.request.as_ollama(self.target_model)
        started = time.perf_counter()
        try:
            async for message in self.target.stream_answer(chat, body):
                part = (message.get("message") or {}) if chat else message
                if thinking := part.get("thinking"):
                    yield ThinkingEvent(thinking)
                if text := part.get("content" if chat else "response"):
                    for event in answer.emitted(output.add(text, "standard")):
                        yield event
                if message.get("done"):
                    answer.note_prompt_tokens(message.get("prompt_eval_count") or 0)
                    for event in answer.emitted(output.end(message.get("done_reason") or "stop")):
                        yield event
        except ServerError as error:
            raise GenerationError.of(error, output.text) from None
        for event in answer.emitted(output.end("stop")):  # a stream that ended without its last message
            yield event
        record = RoundRecord(k=0, emitted=output.tokens, seconds=time.perf_counter() - started,
                             at_seconds=time.perf_counter() - answer.started)
        answer.stats.observe_standard(record)
        yield RoundEvent(record, answer.stats)

    def _choose_k(self, answer: AnswerState) -> int:
        """The next round's draft length: 0 without a drafter, after an empty round, or when the
        controller finds that no K pays; never past the token limit, the room left in the context or
        what the answer's loss budget affords (`AnswerState.affordable`)."""
        if answer.drafter is None or answer.short_segment:
            return 0
        output, limit = answer.output, answer.context_limit
        room = limit - (answer.context_tokens + output.tokens) - 2 if limit and answer.context_tokens else 1 << 30
        # A free drafter's drafts are held to the budget one by one (`verifiable`), a draft model's here.
        afford = 1 << 30 if answer.drafter.free else answer.affordable(answer.after_segment)
        k = answer.controller.choose(min(output.remaining - 1, room, afford))
        if k and output.tokens == 0 and answer.controller.fixed_k is None:
            # The first token as fast as standard generation: a round would add a draft and K rows to the
            # prompt's evaluation (0.3 standard tokens each here). A fixed K is verified from the start.
            answer.first_token = True
            return 0
        return k

    async def _standard_segment(self, answer: AnswerState) -> AsyncIterator[Event]:
        """Standard generation of about a segment's tokens (exactly what the target writes).

        It reads on past its length only to finish a character split over tokens, then closes the stream.
        """
        output, plan = answer.output, answer.plan
        if answer.drafter is None or answer.asks_every_token():
            tokens = output.remaining  # with a free drafter: until a draft pays (`_draft_pays`)
        else:
            tokens = 1 if answer.first_token else answer.controller.segment_tokens()
            if answer.short_segment:
                doubled = SHORT_SEGMENT_TOKENS << min(max(answer.empty_drafts - 1, 0), 8)
                tokens = min(doubled, max(tokens, SHORT_SEGMENT_TOKENS))
        # The client's options as sent: upstream merges the model's parameters in, as for a direct request.
        request = {**answer.request.raw_options, "num_predict": output.remaining}
        if not plan.sampling.greedy:
            seed = answer.resume_seed
            request["seed"] = seed if seed is not None else int(answer.rng.integers(0, 2**31 - 1))
        answer.short_segment, answer.resume_seed, answer.proposal = False, None, None  # a proposal is for its context
        answer.first_token = False
        segment_started = time.perf_counter()
        first_token_at: float | None = None
        count = 0
        drain = Drain()  # in process, the segment ends after the token in flight, which is used (target.py)
        try:
            # `format`: the grammar resumes after the answer's text so far (over HTTP there is only
            # one segment, from the answer's start: planning.standard_reason).
            async for chunk in self.target.stream_raw(self.target_model, answer.context, request,
                                                      format=answer.format, drain=drain):
                if chunk.tokens and first_token_at is None:
                    first_token_at = time.perf_counter()
                count += len(chunk.tokens)
                answer.recent.extend(token.text for token in chunk.tokens)
                if chunk.text or chunk.tokens:
                    if drain.requested:
                        answer.proposal = None  # proposed for the context before this token
                    for event in answer.emitted(output.add(chunk.text, "standard", len(chunk.tokens))):
                        yield event
                if chunk.done_reason is not None:
                    answer.note_prompt_tokens(chunk.prompt_tokens - (output.tokens - count))
                    for event in answer.emitted(output.end(chunk.done_reason)):
                        yield event
                    break
                whole = not chunk.tokens or chunk.tokens[-1].complete
                if output.done_reason == "length" and count == request["num_predict"]:
                    continue  # the server ends here too: its closing chunk, with the prompt's size, comes at once
                if output.done_reason:
                    break
                if not drain.requested and ((count >= tokens and whole) or (whole and await self._draft_pays(answer))):
                    if not self.target.drains:
                        break  # over HTTP: closed, and the token in flight is lost
                    drain.requested = True
        except ServerError as error:
            raise GenerationError.of(error, output.text) from None
        finished = time.perf_counter()
        if first_token_at is not None:
            answer.controller.record_standard(count, finished - first_token_at)
        answer.grade_unverified(ended=True)
        answer.after_segment = not drain.requested  # a drained stream left no token in flight to wait for
        record = RoundRecord(k=0, emitted=count, seconds=finished - segment_started,
                             at_seconds=finished - answer.started)
        answer.stats.observe_standard(record)
        yield RoundEvent(record, answer.stats)

    async def _speculative_round(self, answer: AnswerState, k: int) -> AsyncIterator[Event]:
        """Draft up to `k` pieces, verify them all at once, emit what the target chose."""
        drafter, controller, method = answer.drafter, answer.controller, answer.plan.method
        assert drafter is not None and method is not None
        round_started = time.perf_counter()
        try:
            options = answer.draft_options()
            proposed, answer.proposal = answer.proposal, None  # what `_draft_pays` found, for this context
            if proposed is None:
                proposed = await asyncio.wait_for(drafter.propose(answer.context, k, options),
                                                  self.config.draft_timeout)
            proposed = proposed.head(k)
            # A probe is verified whole: that is how the controller learns what its drafts are worth.
            confident = len(proposed.confidence) == len(proposed)
            keep = answer.worth_verifying(proposed, answer.after_segment) if confident else len(proposed)
            draft = proposed.head(len(proposed) if controller.probing() else keep)
            drafted_at = time.perf_counter()
            seen = answer.drafter_saw if answer.drafter_saw is not None else -answer.stats.prompt_tokens
            unseen, answer.drafter_saw = answer.output.tokens - seen, answer.output.tokens
            if not draft.pieces:  # nothing (worth) verifying: a short standard segment, then draft again
                if proposed.pieces:  # a draft cut whole is no round; what the target writes next grades it
                    answer.unverified = (len(answer.output.generated), proposed)
                else:
                    controller.record_round(k, 0, 0, drafted_at - round_started, 0.0)
                if not controller.verify_seconds:
                    await self._measure_verification(answer, min(controller.fixed_k or controller.k_max, RECENT_TOKENS))
                answer.short_segment = True
                answer.empty_drafts += 1
                return
            answer.empty_drafts = 0
            verdict = await asyncio.wait_for(
                self.validator.verify(answer.context, draft, answer.plan.sampling, method, answer.rng,
                                      answer.request.raw_options, answer.format),
                self.config.verify_timeout)
        except (TimeoutError, ServerError, OSError) as error:
            yield self._fall_back(answer, error)
            return
        verified_at = time.perf_counter()
        drafter.update(draft, verdict.accepted)
        if len(draft.confidence) == len(draft):
            answer.tally(draft.confidence, verdict.accepted, min(verdict.accepted + 1, len(draft)), draft.source)
        controller.record_round(k, len(draft), verdict.accepted, drafted_at - round_started, verified_at - drafted_at,
                                unseen, draft.confidence, after_segment=answer.after_segment, source=draft.source)
        answer.after_segment = False
        answer.context_tokens = verdict.prompt_tokens - answer.output.tokens
        answer.note_prompt_tokens(answer.context_tokens)
        before = answer.output.tokens
        for event in self._emit(answer, verdict):
            yield event
        record = RoundRecord(k=k, drafted=len(draft), accepted=verdict.accepted,
                             emitted=answer.output.tokens - before, seconds=verified_at - round_started,
                             at_seconds=verified_at - answer.started)
        answer.settle(record.emitted, record.seconds)
        answer.stats.observe_round(record, drafted_at - round_started, verified_at - drafted_at)
        yield RoundEvent(record, answer.stats)
        if not verdict.pieces and not verdict.ended:
            answer.short_segment, answer.resume_seed = True, verdict.resume_seed

    async def _draft_pays(self, answer: AnswerState) -> bool:
        """Whether a free drafter has, now, a draft worth verifying: the standard segment then ends, and
        the next round verifies it (`proposal`). So a copy of an earlier answer is verified from where
        it starts. A draft not worth it is kept (`unverified`) and graded once the target has written
        past it or contradicted it, so that what it was worth is learned all the same."""
        if not answer.asks_every_token():
            return False
        assert answer.drafter is not None
        answer.grade_unverified()
        leaving = not self.target.drains  # a round here also waits for the closed stream's token
        draft = await answer.drafter.propose(answer.context, answer.controller.k_max, GREEDY)
        if not draft.pieces or len(draft.confidence) != len(draft):
            return False
        if answer.worth_verifying(draft, waits=leaving, leaving_segment=leaving) > 0:
            answer.proposal = draft
            return True
        if answer.unverified is None:
            answer.unverified = (len(answer.output.generated), draft)
        return False

    async def _measure_verification(self, answer: AnswerState, k: int) -> None:
        """What verifying K tokens costs on this server, measured once with the target's own last K
        tokens as the draft: where drafts keep coming back empty, a server that evaluates a burst's
        requests one at a time would otherwise never be found out (the controller's `can_pay`).
        K is the longest the controller may choose, where a verification's fixed cost is spread over the
        most tokens (at K = 2 the embedded server on 2 cores looked as if no K could pay, and whole
        conversations went standard). Nothing is emitted from it; a failure leaves the cost unknown."""
        pieces = list(answer.recent)[-k:]
        text = "".join(pieces)
        if len(pieces) < k or "\ufffd" in text or not answer.context.endswith(text):
            return
        started = time.perf_counter()
        try:
            await asyncio.wait_for(
                self.validator.verify(answer.context[: len(answer.context) - len(text)], Draft(pieces), GREEDY,
                                      "greedy", np.random.default_rng(0), answer.request.raw_options),
                self.config.verify_timeout)
        except (TimeoutError, ServerError, OSError):
            return
        answer.controller.record_verification(k, time.perf_counter() - started)

    def _emit(self, answer: AnswerState, verdict: Verdict) -> list[TextEvent]:
        """The verdict's pieces through the output (token limit, stop strings), counted by origin."""
        output, stats = answer.output, answer.stats
        events: list[TextEvent] = []
        for text, origin in verdict.pieces:
            events += answer.emitted(output.add(text, origin))
            stats.correction_tokens += origin == "correction"
            stats.bonus_tokens += origin == "bonus"
            if output.done_reason:
                break
        if verdict.ended and output.done_reason is None:
            events += answer.emitted(output.end("stop"))
        return events

    async def _done(self, answer: AnswerState) -> DoneEvent:
        stats = answer.stats
        if not stats.prompt_tokens:
            # No request of this answer reported the prompt's size (every segment was closed before the
            # server's last message): one token's request on the cached prompt tells it.
            try:
                step = await self.target.next_token(self.target_model, answer.prompt,
                                                    {**answer.request.raw_options, "temperature": 0}, 0, announce(1))
                stats.prompt_tokens = step.prompt_tokens
            except ServerError:
                pass  # the answer is complete; its statistics lack the prompt's size
        if self.drafter is not None:  # what it may learn from for the next answers (suffix decoding)
            self.drafter.finish(answer.prompt, answer.output.generated)
        stats.done_reason = answer.output.done_reason or "stop"
        stats.output_tokens = answer.output.tokens
        stats.finish(time.perf_counter() - answer.started)
        return DoneEvent(answer.output.text, stats)

    # -- helpers -------------------------------------------------------------------------------------

    @staticmethod
    def _fall_back(answer: AnswerState, error: Exception) -> FallbackEvent:
        name = answer.drafter.name if answer.drafter else "draft"
        if isinstance(error, asyncio.TimeoutError):
            reason = f"the draft ({name}) or verification took too long; continuing without speculation"
        else:
            message = error.message if isinstance(error, ServerError) else str(error) or type(error).__name__
            reason = f"speculation failed ({name}): {message}; continuing without speculation"
        answer.stats.fallbacks.append(Fallback(at_token=answer.output.tokens, reason=reason))
        answer.drafter = None
        return FallbackEvent(reason)


async def build_decoder(config: EngineConfig, target: Target, target_model: str, drafter_choice: str,
                        draft_server: Target | None = None, scope: str = "") -> SpeculativeDecoder:
    """A decoder for `drafter_choice`: "none" (standard), a drafter's kind ("lookup"), or a draft model;
    `scope`: what a drafter learns from earlier answers is shared only within it (DraftSetup.scope).
    Raises ServerError with the server's message for a missing target or draft model."""
    await target.show(target_model)  # fails early, with Ollama's message, for an unknown target
    setup = DraftSetup(target, target_model, draft_server or target, config, scope)
    return SpeculativeDecoder(target, target_model, await build_drafter(drafter_choice, setup), config)
