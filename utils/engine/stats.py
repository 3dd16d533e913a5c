"""Per-answer statistics, one schema for the CLI, the app, the store, the benchmarks and the anchor.

Modelled on vLLM's speculative-decoding metrics (`SpecDecodingStats.observe_draft`): counters
updated as each round happens (drafts, drafted and accepted tokens, per-position acceptance), so a
live view takes a `snapshot()` at any moment; the derived rates come from `acceptance_rate` and
`mean_acceptance_length` below, the one place they are defined.
`AnswerStats.model_json_schema()` prints the schema.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


def acceptance_rate(accepted: int, drafted: int) -> float:
    """Accepted draft tokens per drafted token."""
    return accepted / drafted if drafted else 0.0


def mean_acceptance_length(accepted: int, drafts: int) -> float:
    """Tokens per verification step: 1 + accepted / drafts (vLLM's definition); 0 with no drafts."""
    return 1 + accepted / drafts if drafts else 0.0


class Fallback(BaseModel):
    at_token: int = Field(description="output tokens emitted before speculation stopped")
    reason: str


class RoundRecord(BaseModel):
    k: int = Field(description="draft length asked for; 0 is a standard segment")
    drafted: int = 0
    accepted: int = 0
    emitted: int = Field(0, description="output tokens this round produced")
    branches: int = Field(0, description="a tree's branches verified beside the main chain (0: a chain)")
    branch_tokens: int = Field(0, description="of accepted, the pieces of a branch the target took")
    seconds: float = 0.0
    at_seconds: float = Field(0.0, description="time since the request when the round ended")


Mode = Literal["speculative", "standard", "merged"]  # merged: the sum of several answers (merge below)
Method = Literal["greedy", "sample-match", "rejection"]  # how drafts are verified (validator.py)


class AnswerStats(BaseModel):
    mode: Mode = Field(description="'speculative' or 'standard' ('merged' for a sum of answers)")
    target: str
    drafter: str | None = None
    method: Method | None = Field(None, description="greedy | sample-match | rejection")
    engine: Literal["project", "llama.cpp"] = Field("project", description="which engine answered: the project's "
                                                    "or llama-server (the benchmark's anchor)")
    done_reason: str = ""
    prompt_tokens: int = Field(0, description="the target's token count of the prompt, as the server reported it")
    output_tokens: int = 0
    thinking_tokens: int = Field(0, description="of output_tokens, those of the reasoning (a thinking answer's)")
    drafts: int = Field(0, description="verification steps that carried a draft (vLLM num_drafts)")
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    correction_tokens: int = 0
    bonus_tokens: int = 0
    standard_tokens: int = Field(0, description="tokens from standard generation (K = 0 or fallback)")
    tree_rounds: int = Field(0, description="rounds that verified a tree (a draft with branches), not a chain")
    branch_tokens: int = Field(0, description="accepted draft tokens that came from a tree's branch")
    acceptance_rate: float = Field(0.0, description="accepted / drafted")
    mean_acceptance_length: float = Field(
        0.0, description="tokens per verification step: 1 + accepted / drafts (vLLM's definition)"
    )
    per_position_acceptance: list[float] = Field(
        default_factory=list, description="at draft position i: accepted / drafts that reached i"
    )
    position_reached: list[int] = Field(default_factory=list, description="drafts that reached position i")
    position_accepted: list[int] = Field(default_factory=list, description="drafts accepted at position i")
    acceptance_histogram: list[int] = Field(
        default_factory=list, description="index n: drafts of which exactly n tokens were accepted"
    )
    k_history: list[int] = Field(default_factory=list, description="K chosen each round, in order")
    rounds: list[RoundRecord] = Field(default_factory=list)
    fallbacks: list[Fallback] = Field(default_factory=list)
    time_to_first_token_s: float | None = None
    load_seconds: float = Field(0.0, description="loading the target first, waiting for other clients' answers "
                                "where it was loaded otherwise (Ollama's load_duration); not in total_seconds")
    total_seconds: float = 0.0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    standard_seconds: float = 0.0
    tokens_per_second: float = 0.0

    def observe_round(self, record: RoundRecord, draft_seconds: float = 0.0, verify_seconds: float = 0.0) -> None:
        """One speculative round: its counters, then the rates derived from them."""
        self._add(record)
        self.draft_seconds += draft_seconds
        self.verify_seconds += verify_seconds
        if record.drafted:
            self.observe_draft(record.drafted, record.accepted)
        self.tree_rounds += record.branches > 0
        self.branch_tokens += record.branch_tokens

    def observe_standard(self, record: RoundRecord) -> None:
        """One standard segment (K = 0)."""
        self._add(record)
        self.standard_tokens += record.emitted
        self.standard_seconds += record.seconds

    def observe_draft(self, drafted: int, accepted: int) -> None:
        """A verified draft of `drafted` tokens of which the first `accepted` were kept."""
        self.drafts += 1
        self.drafted_tokens += drafted
        self.accepted_tokens += accepted
        _grow(self.acceptance_histogram, drafted + 1)
        self.acceptance_histogram[accepted] += 1
        _grow(self.position_reached, drafted)
        _grow(self.position_accepted, drafted)
        for position in range(min(accepted + 1, drafted)):
            self.position_reached[position] += 1
            self.position_accepted[position] += position < accepted
        self._derive()

    def _derive(self) -> None:
        self.acceptance_rate = acceptance_rate(self.accepted_tokens, self.drafted_tokens)
        self.mean_acceptance_length = mean_acceptance_length(self.accepted_tokens, self.drafts)
        self.per_position_acceptance = [a / r for a, r in zip(self.position_accepted, self.position_reached) if r]

    def snapshot(self, elapsed_seconds: float) -> AnswerStats:
        """A copy as of now, with the speed so far: for live views while the answer streams."""
        copy = self.model_copy(deep=True)
        copy.total_seconds = elapsed_seconds
        copy.tokens_per_second = copy.output_tokens / elapsed_seconds if elapsed_seconds > 0 else 0.0
        return copy

    def finish(self, total_seconds: float) -> None:
        self.total_seconds = total_seconds
        self.tokens_per_second = self.output_tokens / total_seconds if total_seconds > 0 else 0.0

    def _add(self, record: RoundRecord) -> None:
        self.rounds.append(record)
        self.k_history.append(record.k)
        self.output_tokens += record.emitted


def _grow(counts: list[int], size: int) -> None:
    counts.extend([0] * (size - len(counts)))


_SUMMED = ("output_tokens", "drafts", "drafted_tokens", "accepted_tokens", "correction_tokens", "bonus_tokens",
           "standard_tokens", "tree_rounds", "branch_tokens", "total_seconds", "draft_seconds", "verify_seconds",
           "standard_seconds")
_SUMMED_BY_INDEX = ("position_reached", "position_accepted", "acceptance_histogram")


def merge(answers: list[AnswerStats], **fields) -> AnswerStats:
    """Several answers' counters added up and the rates derived again: a pair's or a category's
    totals. `fields` name what the merged answers share (mode, target, drafter)."""
    total = AnswerStats(**{"mode": "merged", "target": "", **fields})
    for answer in answers:
        for name in _SUMMED:
            setattr(total, name, getattr(total, name) + getattr(answer, name))
        for name in _SUMMED_BY_INDEX:
            counts, more = getattr(total, name), getattr(answer, name)
            _grow(counts, len(more))
            for index, count in enumerate(more):
                counts[index] += count
        total.k_history += answer.k_history
    total._derive()
    total.tokens_per_second = total.output_tokens / total.total_seconds if total.total_seconds > 0 else 0.0
    return total
