"""The speculative engine on the real embedded server and real models."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import pytest

from tests.support.distribution import assert_fits, first_token_distribution
from tests.support.engine import answer, settings
from tests.support.models import DRAFT, SMALL, TARGET
from tests.support.prompts import (
    COLOUR,
    COLOURS,
    CONVERSATIONS,
    EQUALITY_PROMPTS,
    EQUALITY_TOKENS,
    PAIR_PROMPTS,
    round_kinds,
)
from utils.embedded.server import EmbeddedServer
from utils.engine.answer import collect
from utils.engine.client import OllamaClient
from utils.engine.controller import PROBE_EVERY, DraftLengthController, FreeDrafts
from utils.engine.decoder import build_decoder
from utils.engine.events import DoneEvent, FallbackEvent, RoundEvent, TextEvent
from utils.engine.memory import EngineMemory
from utils.engine.request import GenerationRequest
from utils.engine.validator import PromptPrefixValidator
from utils.sampling import SamplingOptions

# -- greedy: identical to standard generation ------------------------------------------------------


@pytest.mark.parametrize(
    "target, drafter, prompts",
    [(TARGET, DRAFT, PAIR_PROMPTS), ("qwen2.5-coder:0.5b", SMALL, EQUALITY_PROMPTS),
     ("qwen2.5-coder:0.5b", "lookup", EQUALITY_PROMPTS), ("qwen2.5-coder:0.5b", "suffix", EQUALITY_PROMPTS)],
    ids=["qwen-pair", "smollm2-cross-tokenizer", "prompt-lookup", "suffix"],
)
async def test_greedy_speculative_equals_standard(server_url, standard, target, drafter, prompts):
    """Protects exact greedy output with each kind of drafter: a draft model of the same family, one
    with another tokenizer, and the two model-free drafters. The Qwen pair (its 1.5B target the
    costliest) runs the two shortest prompts of each category, and must still see every kind of
    round: drafts taken whole (with the bonus token), cut short, and refused at their first token."""
    drafted = accepted = 0
    kinds = set()
    for prompt in prompts:
        request = GenerationRequest(prompt=prompt["prompt"], max_tokens=EQUALITY_TOKENS, k=4)
        speculative = await answer(server_url, target, drafter, request)
        assert speculative["text"] == (await standard(target, request))["text"], prompt["id"]
        assert "".join(text for text, _ in speculative["pieces"]) == speculative["text"]
        drafted += speculative["stats"]["drafted_tokens"]
        accepted += speculative["stats"]["accepted_tokens"]
        kinds |= round_kinds(speculative["stats"]["rounds"])
    assert drafted > 0 and accepted > 0  # speculation really ran, and the drafts were used
    if drafter == DRAFT:
        assert kinds == {"all", "some", "none"}, kinds


@pytest.mark.parametrize("late", ["drafts", "context"])
async def test_greedy_exact_when_bursts_arrive_split(server_url, standard, monkeypatch, late):
    """On a busy machine a validator burst can reach the server in two parts, each evaluated apart
    (and the longer prompts first when the context's request is the late one). Here every burst is
    split at a varying point: the late part is sent only once the early part has been answered, so
    the server evaluates the two apart however fast it is. The answers must still be the standard ones."""
    import asyncio

    real_verify, real_next_token = PromptPrefixValidator.verify, OllamaClient.next_token
    burst: dict = {}
    rounds, held = [0], [0]

    async def verify(self, context, draft, *args, **kwargs):
        rounds[0] += 1
        size, split = len(draft) + 1, 1 + rounds[0] % 3
        early = [i for i in range(size) if (i >= split) != (late == "drafts")]
        burst.update(sent=0, early=len(early), answered=0, done=asyncio.Event())
        if not early:
            burst["done"].set()
        try:
            return await real_verify(self, context, draft, *args, **kwargs)
        finally:
            burst.clear()

    async def next_token(self, model, prompt, options, top=0, burst_header=None):
        if not burst:  # not a verification's
            return await real_next_token(self, model, prompt, options, top, burst_header)
        # The validator sends its requests in order: context, context+d1, ...
        index, split = burst["sent"], 1 + rounds[0] % 3
        burst["sent"] += 1
        if (index >= split) == (late == "drafts"):
            held[0] += 1
            await burst["done"].wait()  # until every early request has its answer
            return await real_next_token(self, model, prompt, options, top, burst_header)
        step = await real_next_token(self, model, prompt, options, top, burst_header)
        burst["answered"] += 1
        if burst["answered"] == burst["early"]:
            burst["done"].set()
        return step

    real_about = OllamaClient.about

    async def about(self):  # as any Ollama: no burst endpoint, so each burst is K+1 requests
        return {**await real_about(self), "burst_endpoint": False}

    monkeypatch.setattr(PromptPrefixValidator, "verify", verify)
    monkeypatch.setattr(OllamaClient, "next_token", next_token)
    monkeypatch.setattr(OllamaClient, "about", about)
    drafted = 0
    for prompt in EQUALITY_PROMPTS[:4]:
        request = GenerationRequest(prompt=prompt["prompt"], max_tokens=EQUALITY_TOKENS, k=4)
        speculative = await answer(server_url, "qwen2.5-coder:0.5b", SMALL, request)
        assert speculative["text"] == (await standard("qwen2.5-coder:0.5b", request))["text"], prompt["id"]
        drafted += speculative["stats"]["drafted_tokens"]
    # Bursts really went through the patched requests, and were really split.
    assert drafted > 0 and rounds[0] > 0 and held[0] > 0, (drafted, rounds, held)


async def test_standard_path_equals_ollama_chat(server_url, client):
    """The engine's standard mode (a raw prompt rendered by the server) is what /api/chat writes."""
    for prompt in EQUALITY_PROMPTS[::8]:
        request = GenerationRequest(prompt=prompt["prompt"], max_tokens=24)
        ours = await answer(server_url, "qwen2.5-coder:0.5b", "none", request)
        theirs = await client.chat(model="qwen2.5-coder:0.5b", messages=[{"role": "user", "content": prompt["prompt"]}],
                                   options={"temperature": 0, "num_predict": 24, "num_ctx": 4096})
        assert ours["text"] == theirs.message.content


async def test_stop_strings_and_token_limit_match_standard(server_url):
    request = GenerationRequest(prompt=EQUALITY_PROMPTS[0]["prompt"], max_tokens=60, k=4, stop=["\n\n", "return"])
    standard = await answer(server_url, "qwen2.5-coder:0.5b", "none", request)
    speculative = await answer(server_url, "qwen2.5-coder:0.5b", SMALL, request)
    assert speculative["text"] == standard["text"]
    assert "return" not in speculative["text"] and "\n\n" not in speculative["text"]
    assert speculative["stats"]["done_reason"] == standard["stats"]["done_reason"] == "stop"


# -- sampling: the target's distribution, exactly -----------------------------------------------------





@pytest.mark.parametrize(
    "target, drafter, method, prompt",
    [("qwen2.5-coder:0.5b", SMALL, "sample-match", COLOUR), (TARGET, DRAFT, "rejection", COLOUR),
     ("qwen2.5-coder:0.5b", "suffix", "sample-match", COLOURS)],
    ids=["sample-match", "rejection", "suffix"],
)
async def test_sampling_keeps_the_target_distribution(server_url, target, drafter, method, prompt):
    options = SamplingOptions(temperature=1.0, top_k=5, top_p=1.0)
    expected = await first_token_distribution(server_url, target, prompt, options)
    runs = 240
    seen: Counter[str] = Counter()
    methods = set()
    drafted = 0
    server = OllamaClient(server_url)
    try:
        decoder = await build_decoder(settings(p_min=0.0).engine, server, target, drafter)
        for seed in range(runs):
            request = GenerationRequest(prompt=prompt, raw=True, max_tokens=3, k=2,
                                        options=SamplingOptions(temperature=1.0, top_k=5, top_p=1.0, seed=seed))
            result = await collect(decoder, request)
            seen[result["pieces"][0][0] if result["pieces"] else ""] += 1
            methods.add(result["stats"]["method"])
            drafted += result["stats"]["drafted_tokens"]
    finally:
        await server.aclose()
    assert methods == {method} and drafted > 0, (methods, drafted)  # the draft's tokens were verified
    assert_fits(seen, expected, runs)




@pytest.mark.parametrize("conversation", [CONVERSATIONS[0], CONVERSATIONS[6]], ids=lambda c: c["id"])
async def test_greedy_conversations_are_standard_turn_by_turn_with_model_free_drafters(server_url, conversation):
    """Every turn of a multi-turn edit (and an agent loop) through lookup and suffix decoding, each turn's
    history the earlier standard answers: the answers are the standard ones, and the later turns,
    which repeat the earlier answers, were drafted (K = 4 fixed: every draft is verified). With K
    chosen by the controller too: asked after every standard token, a draft that pays ends the
    segment and is verified as proposed then (segment.py `_draft_pays`)."""
    history, memory = [], EngineMemory()  # the later turns' drafts come from the earlier answers too (suffix)
    drafted = {(drafter, k): 0 for drafter in ("lookup", "suffix") for k in (4, None)}
    for turn in conversation["turns"]:
        history.append({"role": "user", "content": turn})
        request = GenerationRequest(messages=list(history), max_tokens=64)
        standard = await answer(server_url, "qwen2.5-coder:0.5b", "none", request)
        for drafter, k in drafted:
            speculative = await answer(server_url, "qwen2.5-coder:0.5b", drafter, replace(request, k=k), memory)
            assert speculative["text"] == standard["text"], (drafter, k, len(history))
            drafted[drafter, k] += speculative["stats"]["drafted_tokens"] if len(history) > 1 else 0
        history.append({"role": "assistant", "content": standard["text"]})
    print(f"drafted tokens on the later turns: {drafted}")
    assert drafted["suffix", 4] > 0 and drafted["lookup", 4] > 0, drafted  # speculation ran on the later turns


# -- faults and adaptation -------------------------------------------------------------------------


async def test_draft_server_killed_mid_answer_gives_the_standard_answer(server_url, tmp_path):
    prompt = EQUALITY_PROMPTS[0]["prompt"]
    request = GenerationRequest(prompt=prompt, max_tokens=64, k=3)
    standard = await answer(server_url, "qwen2.5-coder:0.5b", "none", request)
    draft_server = EmbeddedServer(log_path=tmp_path / "draft.log")
    draft_url = draft_server.start()
    target, draft = OllamaClient(server_url), OllamaClient(draft_url, timeout=30)
    pieces, fallbacks, killed_at = [], [], None
    try:
        decoder = await build_decoder(settings(draft_timeout=30).engine, target, "qwen2.5-coder:0.5b", SMALL, draft)
        async for event in decoder.stream(request):
            if isinstance(event, RoundEvent) and event.record.drafted and killed_at is None:
                draft_server.process.kill()  # SIGKILL: no goodbye to open connections
                draft_server.process.wait()
                killed_at = len(pieces)
            elif isinstance(event, TextEvent):
                pieces.append(event.text)
            elif isinstance(event, FallbackEvent):
                fallbacks.append(event.reason)
            elif isinstance(event, DoneEvent):
                done = event
    finally:
        draft_server.stop()
        await target.aclose()
        await draft.aclose()
    assert killed_at is not None and killed_at < len(pieces)
    assert done.text == "".join(pieces) == standard["text"]
    assert len(fallbacks) == 1 and SMALL in fallbacks[0]
    assert done.stats.fallbacks and done.stats.standard_tokens > 0


async def test_draft_length_falls_to_zero_when_requests_are_serialised(tmp_path):
    """On a server that evaluates one request at a time (Ollama with OLLAMA_NUM_PARALLEL=1),
    verifying K tokens costs about K+1 target steps, so speculation cannot pay and K must drop to 0.

    How fast this machine is, and how busy, decides what the controller measures, not what it must
    conclude here: it measures standard speed first (K = 0), tries drafts, and, since no draft can pay,
    speculates afterwards only to probe, a round now and then between standard segments: most of the
    answer is standard. Its answers stay the standard ones throughout. Read from the answers' own
    statistics, not from the controller's workings."""
    request = GenerationRequest(prompt=EQUALITY_PROMPTS[20]["prompt"], max_tokens=160)
    memory = EngineMemory()  # the answers learn from each other, as one server's do
    with EmbeddedServer(log_path=tmp_path / "serial.log", batch=False) as serial:
        standard = await answer(serial.url, "qwen2.5-coder:0.5b", "none", request)
        first = await answer(serial.url, "qwen2.5-coder:0.5b", SMALL, request, memory)
        later = [await answer(serial.url, "qwen2.5-coder:0.5b", SMALL, request, memory) for _ in range(2)]
    ks = first["stats"]["k_history"]
    print(f"K each round: {ks}; the later answers': {[a['stats']['k_history'] for a in later]}")
    assert first["text"] == standard["text"] and all(a["text"] == standard["text"] for a in later)
    assert ks[0] == 0  # standard speed is measured first
    assert any(ks)  # speculation was tried, and its verification measured
    # Once measured, it fell to 0: a draft since then only as a probe, after PROBE_EVERY standard
    # segments at the least (probes that do not pay come further apart still).
    tried = ks.index(next(k for k in ks if k))
    since = [i for i in range(tried + 1, len(ks)) if ks[i]]
    assert all(b - a - 1 >= PROBE_EVERY for a, b in zip([tried, *since], since)), ks
    assert first["stats"]["standard_tokens"] > first["stats"]["output_tokens"] / 2, first["stats"]
    # And the answers after it go standard from start to end: not a token drafted, not a round.
    assert all(a["stats"]["drafted_tokens"] == 0 and not any(a["stats"]["k_history"]) for a in later), later


async def test_stats_add_up(server_url):
    result = await answer(server_url, TARGET, DRAFT, GenerationRequest(prompt=EQUALITY_PROMPTS[1]["prompt"],
                                                                       max_tokens=64, k=4))
    stats = result["stats"]
    emitted = stats["accepted_tokens"] + stats["correction_tokens"] + stats["bonus_tokens"] + stats["standard_tokens"]
    assert stats["output_tokens"] == 64 == sum(r["emitted"] for r in stats["rounds"])
    assert emitted >= stats["output_tokens"]  # a round cut short by the token limit emits fewer than it made
    assert sum(stats["acceptance_histogram"]) == stats["drafts"] > 0
    assert stats["k_history"] == [r["k"] for r in stats["rounds"]]
    assert math.isclose(stats["acceptance_rate"], stats["accepted_tokens"] / stats["drafted_tokens"])
    assert math.isclose(stats["mean_acceptance_length"], 1 + stats["accepted_tokens"] / stats["drafts"])
    assert len(stats["per_position_acceptance"]) == max(r["drafted"] for r in stats["rounds"])
    assert all(0 <= a <= 1 for a in stats["per_position_acceptance"])
    assert {origin for _, origin in result["pieces"]} <= {"draft", "correction", "bonus", "standard"}
    assert sum(1 for _, o in result["pieces"] if o == "draft") <= stats["accepted_tokens"]
    assert 0 < stats["time_to_first_token_s"] < stats["total_seconds"]


async def test_the_cost_of_verifying_after_empty_drafts_is_measured_at_the_longest_draft(server_url, monkeypatch):
    """Where drafts come back empty, the controller measures what a verification costs to learn whether
    any K could pay. Measured at the short K an empty draft was asked for, the embedded server on a
    2-core CPU looked as if none could (its fixed cost spread over 3 tokens), and whole conversations
    went standard; measured at the longest K it may choose, the answer is the one that matters."""
    from utils.engine.drafters.base import Draft
    from utils.engine.drafters.lookup import PromptLookupDrafter

    async def finds_nothing(self, context: str, k: int, options: SamplingOptions, width: int = 1) -> Draft:
        return Draft()  # a prompt with nothing to copy (made certain: the answer's own words may repeat)

    measured: list[tuple[int, int]] = []
    real = DraftLengthController.record_verification

    def record_verification(self: DraftLengthController, k: int, seconds: float) -> None:
        measured.append((k, self.k_max))
        real(self, k, seconds)

    monkeypatch.setattr(PromptLookupDrafter, "propose", finds_nothing)
    monkeypatch.setattr(DraftLengthController, "record_verification", record_verification)
    request = GenerationRequest(messages=[{"role": "user", "content": "Tell a short story about a lighthouse."}],
                                max_tokens=48)
    await answer(server_url, "qwen2.5-coder:0.5b", "lookup", request)
    assert measured and all(k == k_max == 8 for k, k_max in measured), measured


async def test_the_first_token_is_not_kept_waiting_for_a_draft(server_url):
    """Where a draft would be verified from the very start, the first token still comes as standard
    generation gives it (a round would add the draft's rows to the prompt's evaluation); verification
    starts from the second. A fixed K is verified from the start, as asked."""
    listing = "\n".join(f"- item {i}: the {colour} box" for i, colour in enumerate(["red", "green", "blue"] * 4))
    # It ends where the list it copies begins: prompt lookup has a draft from the very start.
    copy = (f"<|im_start|>user\nCopy this list exactly:\n{listing}<|im_end|>\n<|im_start|>assistant\n"
            "- item 0: the red box\n- item 1: the green box\n- item 2: the blue box\n- item 3: the")
    request, memory = GenerationRequest(prompt=copy, raw=True, max_tokens=24), EngineMemory()
    await answer(server_url, "qwen2.5-coder:0.5b", "lookup", request, memory)  # the standard speed is learned
    chosen = await answer(server_url, "qwen2.5-coder:0.5b", "lookup", request, memory)
    first = chosen["stats"]["rounds"][0]
    assert first["k"] == 0 and chosen["pieces"][0][1] == "standard", chosen["stats"]["rounds"]
    assert chosen["stats"]["accepted_tokens"] > 0  # and the drafts that follow are verified
    fixed = await answer(server_url, "qwen2.5-coder:0.5b", "lookup", GenerationRequest(prompt=copy, raw=True,
                                                                                        max_tokens=24, k=4), memory)
    assert fixed["stats"]["rounds"][0]["k"] == 4 and fixed["pieces"][0][1] != "standard"


async def test_an_answer_whose_loss_budget_is_spent_verifies_nothing(server_url, monkeypatch):
    """The loss budget (LossBudget.affordable) is what lets a draft be verified at all: with none, and
    no draft sure enough to go past it (SURE), a prompt whose every draft would pay is answered
    standard throughout, word for word the same. Every draft pays (so that only the budget decides:
    on a busy CI machine a slow verification once kept even the copying answer standard)."""
    from utils.engine import budget
    monkeypatch.setattr(FreeDrafts, "cut", lambda self, confidence, *args, **kwargs: len(confidence))
    monkeypatch.setattr(FreeDrafts, "can_pay", lambda self, *args, **kwargs: True)
    listing = "\n".join(f"- item {i}: the {colour} box" for i, colour in enumerate(["red", "green", "blue"] * 4))
    copy = f"<|im_start|>user\nCopy this list exactly:\n{listing}<|im_end|>\n<|im_start|>assistant\n"
    request, memory = GenerationRequest(prompt=copy, raw=True, max_tokens=48), EngineMemory()
    first = await answer(server_url, "qwen2.5-coder:0.5b", "lookup", request, memory)  # the standard speed is learned
    budgeted = await answer(server_url, "qwen2.5-coder:0.5b", "lookup", request, memory)
    assert budgeted["stats"]["accepted_tokens"] > 0, budgeted["stats"]["rounds"]
    monkeypatch.setattr(budget, "LOSS_BUDGET", 0.0)
    monkeypatch.setattr(budget, "FREE_MISSES", 0)
    monkeypatch.setattr(budget, "SURE", 2.0)
    spent = await answer(server_url, "qwen2.5-coder:0.5b", "lookup", request, memory)
    assert spent["stats"]["drafts"] == 0 and all(r["k"] == 0 for r in spent["stats"]["rounds"]), spent["stats"]
    assert spent["text"] == budgeted["text"] == first["text"]


async def test_an_answer_that_reaches_its_token_limit_asks_the_server_nothing_more(server_url, client, monkeypatch):
    """A standard segment that reaches the token limit reads the server's closing message, which comes
    at once and carries the prompt's size. It used to stop before it and ask the model for one more
    token to learn that size: a token's time more than the direct answer, after the last text."""
    asked: list[str] = []
    real = OllamaClient.next_token

    async def next_token(self, model, prompt, *args, **kwargs):
        asked.append(prompt)
        return await real(self, model, prompt, *args, **kwargs)

    monkeypatch.setattr(OllamaClient, "next_token", next_token)
    messages = [{"role": "user", "content": "Tell a short story about a lighthouse."}]
    result = await answer(server_url, "qwen2.5-coder:0.5b", "none", GenerationRequest(messages=messages, max_tokens=12))
    direct = await client.chat(model="qwen2.5-coder:0.5b", messages=messages,
                               options={"temperature": 0, "num_predict": 12})
    assert result["stats"]["done_reason"] == "length" and asked == []
    assert result["stats"]["prompt_tokens"] == direct.prompt_eval_count > 0
