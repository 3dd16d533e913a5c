"""Tree verification on the real embedded server and real models (issue 43).

With `tree_width` 3 and a fixed K every branch a drafter gives is verified (tree_policy.Trees), so
these answers go through trees on every round that has one: greedy answers must still be the
standard ones, and sampled ones keep the target's distribution.
"""

from __future__ import annotations

from collections import Counter

from tests.support.distribution import assert_fits, first_token_distribution
from tests.support.engine import answer, settings
from tests.support.models import SMALL
from tests.support.prompts import COLOURS, CONVERSATIONS, EQUALITY_PROMPTS, EQUALITY_TOKENS
from utils.engine.answer import collect
from utils.engine.client import OllamaClient
from utils.engine.decoder import build_decoder
from utils.engine.memory import EngineMemory
from utils.engine.request import GenerationRequest
from utils.sampling import SamplingOptions

TARGET = "qwen2.5-coder:0.5b"
WIDTH = 3
# Prompt lookup finds one earlier occurrence in these prompts, hence no tree: its trees are in the
# conversations below and in tests/unit/test_tree_proposals.py.
DRAFTERS = ("suffix", SMALL)  # a draft model: its second choices where it is unsure


async def test_greedy_answers_with_trees_equal_standard_on_the_32_prompts(server_url, standard):
    """Protects exact greedy output when whole trees are verified: a branch taken must give the
    standard text, with suffix decoding's and a draft model's second choices."""
    trees = Counter[str]()
    for prompt in EQUALITY_PROMPTS:
        request = GenerationRequest(prompt=prompt["prompt"], max_tokens=EQUALITY_TOKENS, k=4)
        expected = (await standard(TARGET, request))["text"]
        for drafter in DRAFTERS:
            speculative = await answer(server_url, TARGET, drafter, request, tree_width=WIDTH, p_min=0.0)
            assert speculative["text"] == expected, (prompt["id"], drafter)
            stats = speculative["stats"]
            trees[drafter] += stats["tree_rounds"]
            trees["branch tokens"] += stats["branch_tokens"]
    print(f"tree rounds and branch tokens: {dict(trees)}")
    # Trees were verified by each drafter, and the target took some branches (their tokens were emitted).
    assert all(trees[drafter] > 0 for drafter in DRAFTERS) and trees["branch tokens"] > 0, trees


async def test_greedy_conversations_with_trees_are_standard_turn_by_turn(server_url):
    """The later turns of a multi-turn edit and an agent loop, where the suffix tree holds an earlier
    version of a line beside the new one: every turn is the standard answer, with trees verified."""
    trees = Counter[str]()
    for conversation in (CONVERSATIONS[0], CONVERSATIONS[6]):
        history, memory = [], EngineMemory()
        for turn in conversation["turns"]:
            history.append({"role": "user", "content": turn})
            request = GenerationRequest(messages=list(history), max_tokens=64, k=4)
            standard = await answer(server_url, TARGET, "none", request)
            for drafter in ("suffix", "lookup"):
                speculative = await answer(server_url, TARGET, drafter, request, memory, tree_width=WIDTH)
                assert speculative["text"] == standard["text"], (conversation["id"], drafter, len(history))
                trees[drafter] += speculative["stats"]["tree_rounds"]
            history.append({"role": "assistant", "content": standard["text"]})
    assert trees["suffix"] > 0, trees


async def test_sampled_answers_with_trees_keep_the_targets_distribution(server_url):
    """After "One colour is" the prompt went on with red, green and blue: the suffix drafter's tree has
    three continuations, verified as a tree by sample-match (each node its own seed)."""
    options = SamplingOptions(temperature=1.0, top_k=5, top_p=1.0)
    expected = await first_token_distribution(server_url, TARGET, COLOURS, options)
    runs, seen, trees, branch_tokens = 240, Counter[str](), 0, 0
    server = OllamaClient(server_url)
    try:
        decoder = await build_decoder(settings(tree_width=WIDTH).engine, server, TARGET, "suffix")
        for seed in range(runs):
            request = GenerationRequest(prompt=COLOURS, raw=True, max_tokens=3, k=2,
                                        options=SamplingOptions(temperature=1.0, top_k=5, top_p=1.0, seed=seed))
            result = await collect(decoder, request)
            seen[result["pieces"][0][0] if result["pieces"] else ""] += 1
            assert result["stats"]["method"] == "sample-match"
            trees += result["stats"]["tree_rounds"]
            branch_tokens += result["stats"]["branch_tokens"]
    finally:
        await server.aclose()
    assert trees > 0 and branch_tokens > 0, (trees, branch_tokens)  # trees were verified, branches taken
    assert_fits(seen, expected, runs)
