"""A model's KV-cache sequences (slots), the answers in progress in them, and which slot a request gets.

A request goes to the idle slot whose cached text it continues (a conversation's next turn, a
validator burst after the standard segment before it), else to the idle slot used longest ago, so
that the caches of other conversations stay. A validator's one-token prompts that extend one
another are one group, evaluated together in one slot.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from utils.embedded.runtime.cache import Prefix, TokenCache, common_bytes
from utils.embedded.runtime.jobs import Job, RunnerError

LONG_CACHE = 16 << 10  # bytes (about 4k tokens): a cache this long is evicted after the shorter ones


@dataclass
class Slot:
    """One sequence of the KV cache: the tokens it holds (a TokenCache) and the answer in progress there."""

    seq: int  # llama.cpp's sequence id
    cache: TokenCache
    answer: Answer | None = None
    used: int = 0  # when it last served a request (a counter): the idle slot used longest ago goes first


@dataclass
class Answer:
    """An answer being generated in a slot: its job, where it stands, and its next token, sampled
    but not evaluated yet."""

    job: Job
    slot: Slot
    rng: np.random.Generator | None
    prompt_ns: int
    started: int  # time.perf_counter_ns() of its first token
    next: int = -1
    count: int = 0  # tokens given so far


def nested_groups(burst: list[Job]) -> list[list[Job]]:
    """The burst as chains of one-token prompts that extend one another, each chain one group (one
    evaluation in one slot). A validator's chain is one group. A tree's node prompts (validator.py
    `node_prompts`) are its deepest path, the main chain, and each branch as a group of its own: the
    embedded server keeps one KV stream per slot, so a branch's rows cannot share the trunk with the
    main chain's in one decode, and a branch costs decodes of its own. The branches come first and
    the main chain last, in the same slot: the slot is then left as a chain's round leaves it, the
    main chain's tokens in its cache and the model's own token after each (cache.py `chosen`), which
    the next round's prompt continues unless the target took a branch. Each prompt hangs under the
    longest prompt it extends that was asked before it (else any it extends); where two paths are
    as deep, the one asked first is the main chain (node_prompts asks it first, then each branch)."""
    order = {id(job): index for index, job in enumerate(burst)}  # a tie goes to the earlier: the main chain
    jobs = sorted(burst, key=lambda j: len(j.prompt))
    children: list[list[int]] = [[] for _ in jobs]
    roots: list[int] = []
    for index, job in enumerate(jobs):
        prefixes = [earlier for earlier in range(index) if job.num_predict == 1 and jobs[earlier].num_predict == 1
                    and job.prompt.startswith(jobs[earlier].prompt)]
        # Asked before it first: a branch's piece can begin the main chain's ("`" beside "`,"), and the
        # main chain's node must not hang under it (its piece would be tokenized as "`" then ",").
        asked_before = [earlier for earlier in prefixes if order[id(jobs[earlier])] < order[id(job)]]
        parent = max(asked_before or prefixes, key=lambda earlier: len(jobs[earlier].prompt), default=None)
        (roots if parent is None else children[parent]).append(index)
    depth = [1] * len(jobs)  # jobs on the deepest path down from each
    for index in reversed(range(len(jobs))):
        depth[index] += max((depth[child] for child in children[index]), default=0)

    def path(node: int, branches: list[list[Job]]) -> list[Job]:
        """The deepest path down from `node`; the groups of the other children go to `branches`."""
        group = []
        while True:
            group.append(jobs[node])
            if not children[node]:
                return group
            deepest = max(children[node], key=lambda child: (depth[child], -order[id(jobs[child])]))
            for child in children[node]:
                if child != deepest:
                    branches += tree(child)
            node = deepest

    def tree(root: int) -> list[list[Job]]:
        branches: list[list[Job]] = []
        main = path(root, branches)
        return [*branches, main]

    return [group for root in roots for group in tree(root)]


def idle_slot(slots: list[Slot], prompt: bytes) -> Slot | None:
    """The idle slot whose cached text the prompt continues furthest, where that is at least half of
    the cached text (a conversation's next turn) or of the prompt (as llama-server's
    `--slot-prompt-similarity` 0.5: a question asked again, whose cached text is mostly its earlier
    answer); else the idle slot used longest ago, a short cache before a long one (LONG_CACHE): an
    agent's side requests (a title, a quota check) between two turns must not evict the long prompt
    its next turn continues, which would take minutes to read again. A prompt that shares less than
    half of itself, a system prompt say, with a long conversation goes elsewhere, so that
    conversation's cache stays."""
    idle = [slot for slot in slots if slot.answer is None]
    if not idle:
        return None
    shared = {slot.seq: common_bytes(prompt, slot.cache.text) for slot in idle}
    matching = [slot for slot in idle if slot.cache.text
                and 2 * shared[slot.seq] >= min(len(slot.cache.text), len(prompt))]
    if matching:
        return max(matching, key=lambda slot: (shared[slot.seq], -slot.used))
    return min(idle, key=lambda slot: (len(slot.cache.text) >= LONG_CACHE, slot.used))


def tokenize_group(slot: Slot, group: list[Job]) -> list[list[Job]]:
    """Tokenize a nested group against the slot's cache, each prompt as the previous one plus its
    extra text; a prompt that adds no token starts a group of its own."""
    groups: list[list[Job]] = []
    cache = slot.cache
    for job in group:
        last = groups[-1][-1] if groups else None
        try:
            if last is not None:
                job.tokens = cache.after(last.tokens, job.prompt, len(last.prompt))
                job.reuse, job.version, job.walked = last.reuse, last.version, last.walked
            else:
                tokens, job.reuse = cache.tokenize(job.prompt)
                job.tokens, job.version, job.walked = Prefix(tokens), cache.version, len(tokens)
        except Exception as error:  # noqa: BLE001 - reported to the client, never raised here
            job.on_done(RunnerError(f"could not tokenize the prompt: {error}", 400))
            continue
        if last is not None and len(job.tokens) > len(last.tokens):
            groups[-1].append(job)
        else:
            groups.append([job])
    return groups

