"""Per-answer statistics, one JSON schema for the CLI, the app, the store and the benchmarks.

Modelled on vLLM's speculative-decoding metrics (num_drafts, num_draft_tokens, num_accepted_tokens,
per-position acceptance, mean acceptance length), plus what a user of one answer wants to see.
`AnswerStats.model_json_schema()` prints the schema.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class Fallback(BaseModel):
    at_token: int = Field(description="output tokens emitted before speculation stopped")
    reason: str


class RoundRecord(BaseModel):
    k: int = Field(description="draft length asked for; 0 is a standard segment")
    drafted: int = 0
    accepted: int = 0
    emitted: int = Field(0, description="output tokens this round produced")
    seconds: float = 0.0
    at_seconds: float = Field(0.0, description="time since the request when the round ended")


class AnswerStats(BaseModel):
    mode: str = Field(description="'speculative' or 'standard'")
    target: str
    drafter: str | None = None
    method: str | None = Field(None, description="greedy | sample-match | rejection")
    done_reason: str = ""
    output_tokens: int = 0
    drafts: int = Field(0, description="verification steps that carried a draft (vLLM num_drafts)")
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    correction_tokens: int = 0
    bonus_tokens: int = 0
    standard_tokens: int = Field(0, description="tokens from standard generation (K = 0 or fallback)")
    acceptance_rate: float = Field(0.0, description="accepted / drafted")
    mean_acceptance_length: float = Field(
        0.0, description="tokens per verification step: 1 + accepted / drafts (vLLM's definition)"
    )
    per_position_acceptance: list[float] = Field(
        default_factory=list, description="at draft position i: accepted / drafts that reached i"
    )
    acceptance_histogram: list[int] = Field(
        default_factory=list, description="index n: drafts of which exactly n tokens were accepted"
    )
    k_history: list[int] = Field(default_factory=list, description="K chosen each round, in order")
    rounds: list[RoundRecord] = Field(default_factory=list)
    fallbacks: list[Fallback] = Field(default_factory=list)
    time_to_first_token_s: float | None = None
    total_seconds: float = 0.0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    standard_seconds: float = 0.0
    tokens_per_second: float = 0.0

    def add_round(self, record: RoundRecord) -> None:
        self.rounds.append(record)
        self.k_history.append(record.k)
        if record.k == 0 or record.drafted == 0:
            return
        self.drafts += 1
        self.drafted_tokens += record.drafted
        self.accepted_tokens += record.accepted
        if len(self.acceptance_histogram) <= record.drafted:
            self.acceptance_histogram.extend([0] * (record.drafted + 1 - len(self.acceptance_histogram)))
        self.acceptance_histogram[record.accepted] += 1

    def finish(self, total_seconds: float) -> None:
        self.total_seconds = total_seconds
        self.tokens_per_second = self.output_tokens / total_seconds if total_seconds > 0 else 0.0
        if self.drafted_tokens:
            self.acceptance_rate = self.accepted_tokens / self.drafted_tokens
        if self.drafts:
            self.mean_acceptance_length = 1 + self.accepted_tokens / self.drafts
        longest = max((r.drafted for r in self.rounds), default=0)
        self.per_position_acceptance = []
        for position in range(longest):
            reached = [r for r in self.rounds if r.k and r.drafted > position and r.accepted >= position]
            if reached:
                accepted = sum(1 for r in reached if r.accepted > position)
                self.per_position_acceptance.append(accepted / len(reached))
