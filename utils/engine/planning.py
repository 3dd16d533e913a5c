"""Speculate or generate standard: the one place where an answer's way is decided, and why.

An answer is speculated only where the result is the one upstream would give to the same request
asked directly. A thinking answer is speculated like any other and split as upstream splits it
(utils/thinking.py); a chat with tools is parsed as upstream parses it (utils/tool_calls.py).
Everything else is generated standard from the start with a reason (the proxy passes such a request
on unchanged): a grammar (`format`) over HTTP or while thinking, a model whose answers upstream splits
with a built-in parser of its own, model parameters speculation does not keep exact, a server whose
one-token answers cannot verify drafts, and a server where speculation has not paid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from utils.engine.client import LOGPROBS_SINCE
from utils.engine.controller import MAX_RETRY_ANSWERS, RETRY_ANSWERS
from utils.engine.memory import EngineMemory
from utils.engine.model_info import ModelInfo
from utils.engine.stats import Method
from utils.engine.target import ServerError, Target
from utils.sampling import SamplingOptions

# Since Ollama 0.15.5 a `num_predict: 1` request returns its token (0.12.11-0.15.4's Go engine did not).
ONE_TOKEN_SINCE = (0, 15, 5)

FORMAT_REASON = ("`format` constrains the whole answer with a grammar on the server, whose state cannot be "
                 "resumed mid-answer over HTTP: generated standard (`cli.py serve` speculates it in process)")
THINKING_REASON = ("{why}, which the engine does not repeat: upstream answers {model}'s thinking answer itself "
                   "(send `think: false` to have it speculated)")
THINKING_FORMAT_REASON = ("`format` while {model} thinks: upstream constrains only the content, in a second pass "
                          "once the reasoning ends, which the engine does not repeat: upstream answers it")
NO_THINKING_REASON = '{model} cannot think: upstream refuses a request that asks it to ("does not support thinking")'
TOOLS_REASON = "{why}, which the engine does not repeat: upstream answers this chat with tools itself"
PARAMETERS_REASON = ("{model}'s own parameters ({names}) change token choice in ways speculation does not keep "
                     "exact: generated standard")
NO_GAIN_REASON = ("speculation has not paid on this server lately (the drafts were empty or rejected, or "
                  "verifying them cost as much as generating the tokens): generated standard in one request; "
                  f"it tries speculation again after {RETRY_ANSWERS} such answers, then after twice as many each "
                  f"time it still does not pay, up to {MAX_RETRY_ANSWERS}")
# Architectures Ollama's scheduler runs one request at a time whatever OLLAMA_NUM_PARALLEL says
# (server/sched.go, ollama#4165): a verification's K+1 requests queue, and cannot pay.
ONE_SLOT_FAMILIES = {"mllama", "qwen3vl", "qwen3vlmoe", "qwen35", "qwen35moe", "qwen3next", "lfm2", "lfm2moe",
                     "nemotron_h", "nemotron_h_moe", "nemotron_h_omni"}


@dataclass(frozen=True)
class Plan:
    """How one answer is made: with which sampling (the model's parameters merged with the client's
    options, as upstream merges them), where it stops, and either a verification method or the reason
    it is generated standard. `code` is a short label of that reason for metrics."""

    info: ModelInfo
    sampling: SamplingOptions
    stops: list[str]
    method: Method | None = None
    code: str | None = None
    reason: str | None = None
    # Made by upstream's own endpoint, which splits `thinking` from the content or reads tool calls
    # with a parser of its own.
    by_upstream: bool = False
    tool_tag: str | None = None  # a chat with tools: the tag upstream's tool-call parser looks for
    # A thinking answer that upstream splits: the tags (utils/thinking.py). None: not split (thinking off,
    # or a model whose reasoning upstream leaves in the content).
    thinking_tags: tuple[str, str] | None = None

    @property
    def standard(self) -> bool:
        return self.reason is not None


def thinks(info: ModelInfo, think: bool | str | None) -> bool:
    """Whether an answer asks to think: `think` absent is the model's own (a thinking-capable model
    thinks, Ollama 0.12.4+); asked of a model without thinking, upstream refuses it (400), and the
    answer goes to upstream so that it does."""
    return info.thinks if think is None else think not in (False, "false", "")


def standard_reason(info: ModelInfo, request_format: Any, think: bool | str | None, constrains: bool = False,
                    tool_parser: str | None = None, thinking_parser: str | None = None) -> tuple[str, str] | None:
    """(code, reason) for an answer that no drafter could speculate exactly on this server, else None;
    `constrains`: the server resumes a `format` grammar mid-answer (Target.constrains); `tool_parser`
    and `thinking_parser`: why upstream reads this answer's tool calls or splits its thinking with a
    parser of its own (ModelInfo.tool_parser, .thinking_parser)."""
    if tool_parser is not None:
        return "tools", TOOLS_REASON.format(why=tool_parser)
    thinking = thinks(info, think)
    if thinking and not info.thinks:
        return "thinking", NO_THINKING_REASON.format(model=info.name)
    if thinking and request_format is not None:
        return "thinking", THINKING_FORMAT_REASON.format(model=info.name)
    if request_format is not None and not constrains:
        return "format", FORMAT_REASON
    if thinking and thinking_parser is not None:
        return "thinking", THINKING_REASON.format(why=thinking_parser, model=info.name)
    if names := info.inexact_parameters():
        return "parameters", PARAMETERS_REASON.format(model=info.name, names=", ".join(names))
    return None


async def verification_gate(server: Target, info: ModelInfo, options: dict[str, Any],
                            memory: EngineMemory | None = None) -> str | None:
    """Why drafts cannot be verified on this (server, model), or None: probed once per `memory` with one
    raw one-token request (the client's options, so no reload): it must return its token with
    logprobs. The reason names the server's version and the fix."""
    gates = memory.gates if memory is not None else {}
    key = (server.url, info.name)
    if key in gates:
        return gates[key]
    version = await server.version()
    named = f"Ollama {'.'.join(map(str, version))} at {server.url}"
    embedded = await server.is_embedded()
    reason = None
    if not embedded and info.family in ONE_SLOT_FAMILIES:
        reason = (f"{named} runs {info.family} models one request at a time whatever OLLAMA_NUM_PARALLEL says "
                  "(its scheduler, ollama#4165): a verification's requests would queue, so it cannot pay")
    elif not embedded and version < LOGPROBS_SINCE:
        reason = f"{named} returns no logprobs, which verification needs: upgrade to Ollama 0.12.11 or newer"
    else:
        try:
            step = await server.next_token(info.name, "Hello", {**options, "temperature": 0})
        except ServerError:
            return None  # not a verdict on the server: the answer itself reports the failure
        if step.token is None and step.done_reason == "length":
            fix = "upgrade to Ollama 0.15.5 or newer" if version < ONE_TOKEN_SINCE else "report this server's version"
            reason = f"{named} answers a one-token request without its token and logprobs: {fix}"
    gates[key] = reason
    return reason
