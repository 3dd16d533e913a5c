"""A standard segment: standard generation of about a segment's tokens, exactly what the target writes.

The decoding loop runs one where no draft pays (K = 0), after an empty draft, and for an answer's
first token. Its stream ends for one of the reasons in `SegmentEnd`; the segment reads on past its
length only to finish a character split over tokens. Where the segment is left early, a server in
this process finishes the token in flight and ends the stream (a drain); over HTTP the stream is
closed, and the next round waits for the token the server was computing (`waits_for_closed_token`).

An answer that only upstream's own parsers can shape (a built-in thinking or tool-call parser, `format`
while thinking: planning.py) is one standard answer from upstream's own endpoint instead
(`upstream_answer`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from enum import Enum

from utils.engine.answer_state import AnswerState
from utils.engine.events import Event, GenerationError, RoundEvent, ThinkingEvent, ToolCallEvent
from utils.engine.stats import RoundRecord
from utils.engine.target import Drain, ServerError, Target
from utils.sampling import GREEDY

# After an empty draft: a few tokens, then try drafting again; twice as many after each empty draft
# in a row (each segment is a request of its own), up to the controller's segment length.
SHORT_SEGMENT_TOKENS = 4


class SegmentEnd(Enum):
    """Why a standard segment's stream loop stopped."""

    ANSWER = "the answer ended"  # the model's own end, the token limit or a stop string
    LENGTH = "the segment's length"
    DRAFT = "a draft worth verifying"  # a free drafter's, kept in `AnswerState.proposal`
    STREAM = "the stream ended"  # without the server's closing message


class StandardSegment:
    """One segment of `answer` on `target`'s `model`: `run()` yields its events, then `end` says why
    it stopped (a segment left at its LENGTH or for a DRAFT was drained or closed, as the target does)."""

    def __init__(self, target: Target, model: str, answer: AnswerState):
        self.target, self.model, self.answer = target, model, answer
        self.end: SegmentEnd | None = None

    def length(self) -> int:
        """Tokens to generate before the next decision: with a free drafter, until a draft pays."""
        answer = self.answer
        if answer.drafter is None or answer.asks_every_token():
            return answer.output.remaining
        tokens = 1 if answer.first_token else answer.controller.segment_tokens()
        if answer.short_segment:
            doubled = SHORT_SEGMENT_TOKENS << min(max(answer.empty_drafts - 1, 0), 8)
            tokens = min(doubled, max(tokens, SHORT_SEGMENT_TOKENS))
        return tokens

    def request(self) -> dict:
        """The client's options as sent (upstream merges the model's parameters in, as for a direct
        request), for the rest of the answer; a sampled one with the seed it resumes from."""
        answer = self.answer
        request = {**answer.request.raw_options, "num_predict": answer.output.remaining}
        if not answer.plan.sampling.greedy:
            seed = answer.resume_seed
            request["seed"] = seed if seed is not None else int(answer.rng.integers(0, 2**31 - 1))
        return request

    async def run(self) -> AsyncIterator[Event]:
        answer, output = self.answer, self.answer.output
        tokens, request = self.length(), self.request()
        answer.short_segment = answer.first_token = False
        answer.resume_seed, answer.proposal = None, None  # a proposal is for its context
        started = time.perf_counter()
        first_token_at: float | None = None
        count = 0
        drain = Drain()
        try:
            # `format`: the grammar resumes after the answer's text so far (over HTTP there is only
            # one segment, from the answer's start: planning.standard_reason).
            async for chunk in self.target.stream_raw(self.model, answer.context, request,
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
                    self.end = SegmentEnd.ANSWER
                    break
                if output.done_reason == "length" and count == request["num_predict"]:
                    continue  # the server ends here too: its closing chunk, with the prompt's size, comes at once
                if output.done_reason:
                    self.end = SegmentEnd.ANSWER
                    break
                if drain.requested or (chunk.tokens and not chunk.tokens[-1].complete):
                    continue  # draining, or within a character
                if count >= tokens:
                    self.end = SegmentEnd.LENGTH
                elif await self._draft_pays():
                    self.end = SegmentEnd.DRAFT
                else:
                    continue
                if not self.target.drains:
                    break  # over HTTP: closed, and the token in flight is lost
                drain.requested = True
        except ServerError as error:
            raise GenerationError.of(error, output.text) from None
        finished = time.perf_counter()
        if first_token_at is not None:
            answer.controller.record_standard(count, finished - first_token_at)
        answer.grade_unverified(ended=True)
        answer.waits_for_closed_token = not drain.requested
        self.end = self.end or SegmentEnd.STREAM
        record = RoundRecord(k=0, emitted=count, seconds=finished - started, at_seconds=finished - answer.started)
        answer.stats.observe_standard(record)
        yield RoundEvent(record, answer.stats)

    async def _draft_pays(self) -> bool:
        """Whether a free drafter has, now, a draft worth verifying: the segment then ends, and the next
        round verifies it (`proposal`). So a copy of an earlier answer is verified from where it
        starts. A draft not worth it is kept (`unverified`) and graded once the target has written
        past it or contradicted it, so that what it was worth is learned all the same."""
        answer = self.answer
        if not answer.asks_every_token():
            return False
        assert answer.drafter is not None
        answer.grade_unverified()
        waits = not self.target.drains  # a round here also waits for the closed stream's token
        draft = await answer.drafter.propose(answer.context, answer.controller.k_max, GREEDY)
        if not draft.pieces or len(draft.confidence) != len(draft):
            return False
        if answer.budget.worth_verifying(draft, waits, leaves_segment=True) > 0:
            answer.proposal = draft
            return True
        if answer.unverified is None:
            answer.unverified = (len(answer.output.generated), draft)
        return False


async def upstream_answer(target: Target, model: str, answer: AnswerState) -> AsyncIterator[Event]:
    """A thinking answer or a chat with tools that upstream reads with a built-in parser of its own, made by
    upstream's own endpoint (the client's request as it is), so that `thinking`, the content and the
    calls are split exactly as for a direct request. The reasoning comes as ThinkingEvents, the calls
    as ToolCallEvents; the content goes through the output like any standard text."""
    output = answer.output
    chat, body = answer.request.as_ollama(model)
    started = time.perf_counter()
    try:
        async for message in target.stream_answer(chat, body):
            part = (message.get("message") or {}) if chat else message
            if thinking := part.get("thinking"):
                yield ThinkingEvent(thinking)
            if calls := part.get("tool_calls"):  # read by upstream's own parser (planning.py, "tools")
                yield ToolCallEvent(calls)
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
