"""The decoding loop: standard or speculative generation from a target model, as a stream of events.

Each turn of the loop is one named step: `_choose_k` asks the controller for a draft length; K = 0
is a standard segment (segment.py), anything else a `_speculative_round` (the drafter proposes up to K pieces,
the validator asks the target for its own token at every position at once, the accepted pieces and
the target's token after them are emitted). Any drafter or validator failure ends speculation for
the answer, which goes on by standard generation from exactly where it was: nothing is emitted that
the target did not choose, so nothing is lost or repeated.

Everything above this module (CLI, chat page, charts, store, benchmarks) consumes the events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace

import numpy as np

from utils.burst import announce
from utils.engine.answer_state import RECENT_TOKENS, AnswerState
from utils.engine.config import EngineConfig
from utils.engine.controller import DraftLengthController
from utils.engine.drafters import Draft, Drafter, DraftSetup, build_drafter
from utils.engine.events import DoneEvent, Event, FallbackEvent, GenerationError, RoundEvent
from utils.engine.memory import EngineMemory
from utils.engine.model_info import loaded_context, model_info
from utils.engine.output import Output
from utils.engine.planning import FORMAT_REASON, NO_GAIN_REASON, Plan, standard_reason, thinks, verification_gate
from utils.engine.request import GenerationRequest
from utils.engine.segment import StandardSegment, upstream_answer
from utils.engine.stats import AnswerStats, Fallback, RoundRecord
from utils.engine.target import ServerError, Target
from utils.engine.thinking_answer import ThinkingAnswer
from utils.engine.tool_answer import ToolAnswer
from utils.engine.validator import PromptPrefixValidator, choose_method
from utils.sampling import GREEDY
from utils.thinking import server_tags
from utils.tool_calls import tool_tag

__all__ = ["FORMAT_REASON", "NO_GAIN_REASON", "SpeculativeDecoder", "build_decoder"]


class SpeculativeDecoder:
    """Generates from `target_model` on `target`, speculatively when `drafter` is given; what its
    answers learn for the next ones is kept in `memory` (its owner's: memory.py)."""

    def __init__(self, target: Target, target_model: str, drafter: Drafter | None, config: EngineConfig,
                 memory: EngineMemory | None = None):
        self.target, self.target_model, self.drafter, self.config = target, target_model, drafter, config
        self.memory = memory if memory is not None else EngineMemory()
        self.validator = PromptPrefixValidator(target, target_model)

    async def raw_prompt(self, request: GenerationRequest, think: bool | str | None = None) -> str:
        """The prompt as the target's template makes it, with the client's options and `think`."""
        if request.raw:
            return request.prompt
        messages = list(request.messages or [])
        if request.messages is None:
            messages = ([{"role": "system", "content": request.system}] if request.system else [])
            messages.append({"role": "user", "content": request.prompt})
        return await self.target.render_chat(self.target_model, messages, request.options, think, request.tools)

    async def plan(self, request: GenerationRequest) -> Plan:
        """How an answer to `request` is made (planning.py): asked once per answer, before any text.

        Raises ServerError with the server's message (an unknown model, an unreachable server)."""
        info = await model_info(self.target, self.target_model, self.target.described)
        sampling, stops = info.sampling(request.options), info.stops(request.options)
        # A chat with tools is parsed, and a thinking answer split, as upstream does (utils/tool_calls.py,
        # utils/thinking.py); the embedded server does so for every model, where Ollama may use a parser
        # of its own (ModelInfo.tool_parser, .thinking_parser) and splits by its Go template's tags only.
        embedded = await self.target.is_embedded()
        tag = tool_tag(info.template) if request.tools else None
        others = info.tool_parser if tag is not None and not embedded else None
        thinking = info.thinks and thinks(info, request.think)
        tags = server_tags(info.template, embedded) if thinking else None
        own = info.thinking_parser if thinking and not embedded else None
        plan = Plan(info, sampling, stops, tool_tag=tag, thinking_tags=tags)
        if why := standard_reason(info, request.format, request.think, self.target.constrains, others, own):
            return replace(plan, code=why[0], reason=why[1], by_upstream=why[0] in ("thinking", "tools"))
        if self.drafter is None:
            return plan
        if gate := await verification_gate(self.target, info, request.raw_options, self.memory):
            return replace(plan, code="server", reason=gate)
        # Under a grammar the top log-probabilities are not what is sampled from: sample-match, not rejection.
        exact = self.drafter.exact_distribution and await self.target.exact_logprobs() and request.format is None
        method = choose_method(sampling, exact)
        controller = self._controller(method, request.k)
        controller.seen(self._others(mine=0))  # this answer is not in progress yet
        waits = not self.target.drains
        # A drafter set aside is retried for an answer that begins by copying (Drafter.copies): asked
        # only where the answer would go standard, as it renders the prompt once more.
        copies = controller.skips(waits) and await self.drafter.copies(await self.raw_prompt(request, request.think))
        if controller.start_answer(waits_for_closed_token=waits, copies=copies):
            return replace(plan, method=method, code="no_gain", reason=NO_GAIN_REASON)
        return replace(plan, method=method)

    async def stream(self, request: GenerationRequest, plan: Plan | None = None) -> AsyncGenerator[Event, None]:
        """The answer's events; `plan`: the one `plan(request)` gave, if the caller already asked. The
        target keeps its model as the answer loads it until the answer ends (Target.hold)."""
        async with self.target.hold(self.target_model, request.options) as load, self._in_progress():
            answer = await self._start(request, plan or await self._planned(request))
            # A draft model its server unloaded (keep_alive) is loaded before any round is timed, so the
            # controller never counts the load as drafting (Drafter.prepare).
            drafting = await answer.drafter.prepare() if answer.drafter is not None else 0.0
            answer.stats.load_seconds = load + drafting
            splits = self._shapes(answer)
            async for event in self._events(answer):
                shaped = [event]
                for split in splits:  # the thinking first, then the tool calls in the content, as Ollama
                    shaped = [each for part in shaped for each in split(part)]
                for each in shaped:
                    yield each

    @staticmethod
    def _shapes(answer: AnswerState) -> list[Callable[[Event], list[Event]]]:
        """What the answer's text becomes as upstream shapes it: its thinking split out, then tool calls
        parsed out of the content; nothing where upstream's own endpoint made the answer."""
        plan, shapes = answer.plan, list[Callable[[Event], list[Event]]]()
        if plan.by_upstream:
            return shapes
        if plan.thinking_tags is not None:
            thinking = ThinkingAnswer(plan.thinking_tags, answer.prompt)

            def split_thinking(event: Event) -> list[Event]:
                if isinstance(event, DoneEvent):
                    event.stats.thinking_tokens = answer.output.tokens_within(thinking.reasoning_characters())
                return thinking.split(event)
            shapes.append(split_thinking)
        if plan.tool_tag is not None:
            shapes.append(ToolAnswer(plan.tool_tag, answer.request.tools or []).split)
        return shapes

    async def _events(self, answer: AnswerState) -> AsyncIterator[Event]:
        for fallback in answer.stats.fallbacks:  # generated standard from the start: say why at once
            yield FallbackEvent(fallback.reason)
        if answer.plan.by_upstream:
            async for event in upstream_answer(self.target, self.target_model, answer):
                yield event
        while answer.output.done_reason is None:
            k = self._choose_k(answer)
            segment = StandardSegment(self.target, self.target_model, answer)
            steps = segment.run() if k == 0 else self._speculative_round(answer, k)
            async for event in steps:
                yield event
        yield await self._done(answer)

    # -- the steps -----------------------------------------------------------------------------------

    @asynccontextmanager
    async def _in_progress(self) -> AsyncIterator[None]:
        """Counts this answer among those in progress on the model, for the others' controllers (`_others`)."""
        key = (self.target.url, self.target_model)
        self.memory.answering[key] += 1
        try:
            yield
        finally:
            self.memory.answering[key] -= 1

    def _others(self, mine: int = 1) -> int:
        """The other answers in progress on the model, as this memory counts them (its owner's answers:
        the proxy's, `cli.py serve`'s), whose tokens share the server's decodes with this answer's rounds."""
        return self.memory.answering[self.target.url, self.target_model] - mine

    def _controller(self, method: str | None, k: int | None) -> DraftLengthController:
        """The controller of answers verified by `method`: one per (server, target, drafter, method),
        shared by the answers of this memory."""
        key = (self.target.url, self.target_model, self.drafter and self.drafter.name, method)
        return self.memory.controller(key, self.config.k_max, k, free=self.drafter is not None and self.drafter.free,
                                      tree_width=self.config.tree_width)

    async def _planned(self, request: GenerationRequest) -> Plan:
        try:
            return await self.plan(request)
        except ServerError as error:
            raise GenerationError.of(error, "") from None

    async def _start(self, request: GenerationRequest, plan: Plan) -> AnswerState:
        asked = self.drafter
        try:  # rendered with the request's own `think`: a thinking answer is the raw continuation of its prompt
            prompt = "" if plan.by_upstream else await self.raw_prompt(request, request.think)
            # The context the target is loaded with (the prompt's request loaded it), else its Modelfile's.
            limit = None if plan.by_upstream else (await loaded_context(self.target, self.target_model)
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

    def _choose_k(self, answer: AnswerState) -> int:
        """The next round's draft length: 0 without a drafter, after an empty round, or when the
        controller finds that no K pays; never past the token limit, the room left in the context or
        what the answer's loss budget affords (budget.py)."""
        if answer.drafter is None or answer.short_segment:
            return 0
        answer.controller.seen(self._others())  # the load this round is decided and measured under
        output, limit = answer.output, answer.context_limit
        room = limit - (answer.context_tokens + output.tokens) - 2 if limit and answer.context_tokens else 1 << 30
        # A free drafter's drafts are held to the budget one by one (`verifiable`), a draft model's here.
        afford = 1 << 30 if answer.drafter.free else answer.budget.affordable(answer.waits_for_closed_token)
        k = answer.controller.choose(min(output.remaining - 1, room, afford))
        if k and output.tokens == 0 and answer.controller.first_token_standard:
            # The first token as fast as standard generation: a round would add a draft and K rows to the
            # prompt's evaluation (0.3 standard tokens each here). A fixed K is verified from the start.
            answer.first_token = True
            return 0
        return k

    async def _speculative_round(self, answer: AnswerState, k: int) -> AsyncIterator[Event]:
        """Draft up to `k` pieces, verify them all at once, emit what the target chose."""
        drafter, controller, method = answer.drafter, answer.controller, answer.plan.method
        assert drafter is not None and method is not None
        round_started = time.perf_counter()
        try:
            options = answer.draft_options()
            proposed, answer.proposal = answer.proposal, None  # what the segment's drafter found, for this context
            if proposed is None:
                proposed = await asyncio.wait_for(drafter.propose(answer.context, k, options, controller.trees.width),
                                                  self.config.draft_timeout)
            proposed = proposed.head(k)
            controller.seen(others := self._others())
            # A probe is verified whole: that is how the controller learns what its drafts are worth.
            keep = (answer.budget.worth_verifying(proposed, answer.waits_for_closed_token)
                    if len(proposed.confidence) == len(proposed) else len(proposed))
            draft = proposed.head(len(proposed) if controller.probing() else keep)
            # The branches that pay (tree_policy.py; none by default). Rejection sampling verifies chains.
            draft = draft.chain() if method == "rejection" else controller.trees.shape(draft, controller,
                                                                                       answer.budget.trust())
            drafted_at = time.perf_counter()
            seen = answer.drafter_saw if answer.drafter_saw is not None else -answer.stats.prompt_tokens
            unseen, answer.drafter_saw = answer.output.tokens - seen, answer.output.tokens
            if not draft.pieces:  # nothing (worth) verifying: a short standard segment, then draft again
                if proposed.pieces:  # a draft cut whole is no round; what the target writes next grades it
                    answer.unverified = (len(answer.output.generated), proposed)
                else:
                    controller.record_round(k, 0, 0, drafted_at - round_started, 0.0)
                if not controller.cost.verify_seconds:
                    await self._measure_verification(answer, min(controller.longest, RECENT_TOKENS))
                answer.short_segment = True
                answer.empty_drafts += 1
                return
            answer.empty_drafts = 0
            verdict = await asyncio.wait_for(
                self.validator.verify(answer.context, draft, answer.plan.sampling, method, answer.rng,
                                      answer.request.raw_options, answer.format),
                self.config.verify_timeout)
        except (TimeoutError, ServerError, OSError) as error:
            yield answer.fall_back(error)
            return
        verified_at = time.perf_counter()
        drafter.update(draft, verdict.accepted)
        # What the main chain kept: all that was accepted, or up to the branch the target took instead.
        main = verdict.accepted if verdict.branch is None else draft.branches[verdict.branch].at
        if len(draft.confidence) == len(draft):
            answer.budget.tally(draft.confidence, main, min(main + 1, len(draft)), draft.source)
        controller.seen(others)  # measured under the load it was decided at
        controller.record_round(k, len(draft), main, drafted_at - round_started, verified_at - drafted_at,
                                unseen, draft.confidence, waited_for_closed_token=answer.waits_for_closed_token,
                                source=draft.source, tree=bool(draft.branches))
        controller.trees.record(draft, main, verdict.branch, verified_at - drafted_at, controller)
        answer.waits_for_closed_token = False
        answer.context_tokens = verdict.prompt_tokens - answer.output.tokens
        answer.note_prompt_tokens(answer.context_tokens)
        before = answer.output.tokens
        for event in answer.take(verdict):
            yield event
        record = RoundRecord(k=k, drafted=draft.rows, accepted=verdict.accepted,
                             emitted=answer.output.tokens - before, seconds=verified_at - round_started,
                             at_seconds=verified_at - answer.started, branches=len(draft.branches),
                             branch_tokens=verdict.accepted - main)
        answer.budget.settle(record.emitted, record.seconds)
        answer.stats.observe_round(record, drafted_at - round_started, verified_at - drafted_at)
        yield RoundEvent(record, answer.stats)
        if not verdict.pieces and not verdict.ended:
            answer.short_segment, answer.resume_seed = True, verdict.resume_seed

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


async def build_decoder(config: EngineConfig, target: Target, target_model: str, drafter_choice: str,
                        draft_server: Target | None = None, memory: EngineMemory | None = None) -> SpeculativeDecoder:
    """A decoder for `drafter_choice`: "none" (standard), a drafter's kind ("lookup"), or a draft model;
    `memory`: what its answers learn is shared with the decoders built with the same one (None: a
    memory of its own). Raises ServerError with the server's message for a missing target or draft model."""
    await target.show(target_model)  # fails early, with Ollama's message, for an unknown target
    memory = memory if memory is not None else EngineMemory()
    setup = DraftSetup(target, target_model, draft_server or target, config, memory)
    return SpeculativeDecoder(target, target_model, await build_drafter(drafter_choice, setup), config, memory)
