"""One answer's state as the decoding loop (decoder.py) goes: what it was asked, its plan, drafter,
controller and loss budget, its output and statistics so far, and what one step leaves the next."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from utils.engine.budget import LossBudget
from utils.engine.controller import DraftLengthController
from utils.engine.drafters import Draft, Drafter
from utils.engine.events import FallbackEvent, TextEvent
from utils.engine.output import Output
from utils.engine.planning import Plan
from utils.engine.request import GenerationRequest
from utils.engine.stats import AnswerStats, Fallback
from utils.engine.target import AnswerFormat, ServerError
from utils.engine.validator import Verdict
from utils.sampling import GREEDY, SamplingOptions

RECENT_TOKENS = 16  # the last tokens an answer keeps, to measure what verifying costs (decoder.py)


@dataclass
class AnswerState:
    """The state of one answer as the loop goes."""

    request: GenerationRequest
    plan: Plan
    prompt: str
    drafter: Drafter | None  # None once speculation has failed for this answer
    controller: DraftLengthController
    stats: AnswerStats
    output: Output
    rng: np.random.Generator
    started: float = field(default_factory=time.perf_counter)
    context_limit: int | None = None  # the context the target is loaded with, where the server says
    context_tokens: int = 0  # the target's token count for the prompt, as its last answer reported
    # What one step leaves the next:
    short_segment: bool = False  # the last round emitted nothing: generate a few tokens normally
    empty_drafts: int = 0  # ... after so many empty drafts in a row
    first_token: bool = False  # the first segment gives one token, then the controller's K is verified
    # The last standard segment's stream was closed mid-token (over HTTP): the next round also waits
    # for the token the server was computing. A drained stream (in process) leaves none in flight.
    waits_for_closed_token: bool = False
    resume_seed: int | None = None  # sample-match: draw the next standard token with this seed
    drafter_saw: int | None = None  # output tokens in the drafter's last context (None: it saw nothing yet)
    unverified: tuple[int, Draft] | None = None  # a draft not worth verifying, and where it was proposed
    proposal: Draft | None = None  # a free drafter's draft for the context as it is, to verify next
    # The texts of the last tokens of standard segments.
    recent: deque[str] = field(default_factory=lambda: deque(maxlen=RECENT_TOKENS))
    budget: LossBudget = field(init=False)

    def __post_init__(self) -> None:
        self.budget = LossBudget(self.controller, self.started)

    @property
    def context(self) -> str:
        return self.prompt + self.output.generated

    @property
    def format(self) -> AnswerFormat | None:
        """The request's `format` as the target resumes it: it constrains the text after the prompt."""
        return None if self.request.format is None else AnswerFormat(self.request.format, len(self.prompt))

    def note_prompt_tokens(self, count: int) -> None:
        """The server's token count of the prompt alone, from the first answer that reports one."""
        if not self.stats.prompt_tokens and count > 0:
            self.stats.prompt_tokens = count

    def grade_unverified(self, ended: bool = False) -> None:
        """Hold the draft that was not worth verifying (`unverified`) against what the target wrote after
        it, and teach the controller what its confidences were worth (`Draft.graded`): once the target
        has written past it or contradicted it, or, when its standard segment has `ended`, as far as
        the target got."""
        if self.unverified is None:
            return
        at, draft = self.unverified
        accepted, decided = draft.graded(self.output.generated[at:])
        if ended or decided > accepted or accepted == len(draft):
            self.budget.tally(draft.confidence, accepted, decided, draft.source)
            self.controller.calibration.observe_confidence(draft.confidence, accepted, decided, draft.source)
            self.unverified = None

    def asks_every_token(self) -> bool:
        """Whether the drafter is asked after every standard token: a free one (a proposal costs
        microseconds) choosing its own lengths, once the standard speed it must beat is known."""
        return self.drafter is not None and self.plan.method is not None and self.controller.asks_every_token()

    def draft_options(self) -> SamplingOptions:
        """Greedy and sample-match draft the most likely pieces; rejection sampling must draw them."""
        if self.plan.method != "rejection":
            return GREEDY
        options = self.plan.sampling
        return SamplingOptions(options.temperature, options.top_k, options.top_p, options.min_p,
                               seed=int(self.rng.integers(0, 2**31 - 1)))

    def take(self, verdict: Verdict) -> list[TextEvent]:
        """The verdict's pieces through the output (token limit, stop strings), counted by origin."""
        output, stats = self.output, self.stats
        events: list[TextEvent] = []
        for text, origin in verdict.pieces:
            events += self.emitted(output.add(text, origin))
            stats.correction_tokens += origin == "correction"
            stats.bonus_tokens += origin == "bonus"
            if output.done_reason:
                break
        if verdict.ended and output.done_reason is None:
            events += self.emitted(output.end("stop"))
        return events

    def fall_back(self, error: Exception) -> FallbackEvent:
        """Speculation failed (`error`): the answer goes on by standard generation from where it is."""
        name = self.drafter.name if self.drafter else "draft"
        if isinstance(error, asyncio.TimeoutError):
            reason = f"the draft ({name}) or verification took too long; continuing without speculation"
        else:
            message = error.message if isinstance(error, ServerError) else str(error) or type(error).__name__
            reason = f"speculation failed ({name}): {message}; continuing without speculation"
        self.stats.fallbacks.append(Fallback(at_token=self.output.tokens, reason=reason))
        self.drafter = None
        return FallbackEvent(reason)

    def emitted(self, events: list[TextEvent]) -> list[TextEvent]:
        """Text as it leaves the output, stamped with when (its `tokens` are the output's count)."""
        now = time.perf_counter() - self.started
        if events and self.stats.time_to_first_token_s is None:
            self.stats.time_to_first_token_s = now
        for event in events:
            event.at_seconds = now
        return events
