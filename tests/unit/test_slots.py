"""Which idle slot a request gets (utils/embedded/runtime/slots.py `idle_slot`) and how a nested group is
tokenized (`tokenize_group`), on exact small caches."""

from __future__ import annotations

from utils.embedded.runtime.cache import Prefix, TokenCache
from utils.embedded.runtime.jobs import Job
from utils.embedded.runtime.slots import Slot, idle_slot, nested_groups, tokenize_group
from utils.sampling import SamplingOptions

SYSTEM = b"<|system|>You are a helpful assistant.<|end|>"


def slot(seq: int, text: bytes, used: int) -> Slot:
    cache = TokenCache([], lambda text, bos: [], adds_bos=False, bos=0)
    cache.text = bytearray(text)
    return Slot(seq=seq, cache=cache, used=used)


def test_a_question_asked_again_goes_to_the_slot_that_holds_it_and_its_answer() -> None:
    question = SYSTEM + b"<|user|>Write a SQL query.<|end|><|assistant|>"
    answered = slot(0, question + b"SELECT name FROM customers JOIN orders ON ... " * 5, used=2)
    assert len(question) * 2 < len(answered.cache.text)  # the answer is most of what it holds
    assert idle_slot([answered, slot(1, b"", used=1)], question) is answered


def test_a_conversation_s_next_turn_continues_its_slot() -> None:
    turn = SYSTEM + b"<|user|>Hi<|end|><|assistant|>Hello!<|end|>"
    other = slot(1, SYSTEM + b"<|user|>Something else entirely<|end|>", used=1)
    mine = slot(0, turn, used=2)
    assert idle_slot([other, mine], turn + b"<|user|>" + b"Now a long follow-up question. " * 10) is mine


def test_a_new_conversation_that_shares_only_a_system_prompt_leaves_a_long_one_alone() -> None:
    long_conversation = slot(0, SYSTEM + b"<|user|>Hi<|end|><|assistant|>" + b"a long answer " * 40, used=2)
    empty = slot(1, b"", used=1)
    new = SYSTEM + b"<|user|>" + b"A question much longer than the system prompt before it. " * 3
    assert idle_slot([long_conversation, empty], new) is empty


def test_with_no_match_the_slot_used_longest_ago_goes_first_and_a_busy_one_never() -> None:
    a, b = slot(0, b"one text", used=5), slot(1, b"another", used=3)
    assert idle_slot([a, b], b"unrelated prompt") is b
    b.answer = object()  # type: ignore[assignment] - busy
    assert idle_slot([a, b], b"unrelated prompt") is a
    a.answer = object()  # type: ignore[assignment]
    assert idle_slot([a, b], b"unrelated prompt") is None


def test_a_nested_group_s_prompts_are_prefixes_of_one_token_list_that_no_later_prompt_changes() -> None:
    """A validator burst's prompts, each the one before plus a drafted piece: every job's tokens are
    what tokenizing its prompt alone gives, held as prefixes of one list (no copy per prompt)."""
    words = [b"def", b" add", b"(a", b", b", b"):", b" return"]
    pieces = [b"<s>", *words]

    def tokenize(text: bytes, bos: bool) -> list[int]:  # greedy longest match over the pieces above
        out = [0] if bos else []
        while text:
            token = max((i for i in range(1, len(pieces)) if text.startswith(pieces[i])), key=lambda i: len(pieces[i]))
            out.append(token)
            text = text[len(pieces[token]):]
        return out

    cache = TokenCache(pieces, tokenize, adds_bos=True, bos=0)
    prompts = [b"".join(words[:n]) for n in (3, 4, 4, 5, 6)]  # the third adds nothing to the second
    jobs = [Job(prompt, SamplingOptions(temperature=0.0), 1, None, on_token=print, on_done=print) for prompt in prompts]
    groups = tokenize_group(Slot(seq=0, cache=cache), jobs)
    assert [[job.prompt for job in group] for group in groups] == [prompts[:2], prompts[2:]]
    for job in jobs:
        assert list(job.tokens) == tokenize(job.prompt, True) and len(job.tokens) == len(tokenize(job.prompt, True))
    assert jobs[0].tokens[1:] == [1, 2, 3] and jobs[0].tokens[-2] == 2 and jobs[0].tokens[-1] == 3
    assert jobs[4].tokens == [0, 1, 2, 3, 4, 5, 6]
    assert isinstance(jobs[0].tokens, Prefix) and jobs[0].tokens.items is jobs[4].tokens.items  # shared, not copied


def one_token(prompt: bytes, num_predict: int = 1) -> Job:
    return Job(prompt, SamplingOptions(), num_predict, None, lambda token: None, lambda done: None)


def prompts(groups: list[list[Job]]) -> list[list[bytes]]:
    return [[job.prompt for job in group] for group in groups]


def test_a_chain_is_one_group_and_a_tree_its_main_chain_then_each_branch() -> None:
    """Pieces of any length: the main chain's prompts are not broken up by a branch's shorter ones."""
    chain = [b"c", b"cA", b"cABBB", b"cABBBC"]
    assert prompts(nested_groups([one_token(p) for p in reversed(chain)])) == [chain]
    # A tree (validator.node_prompts): main A BBB C, a branch X Y at position 1 and a branch Z at 0.
    tree = [*chain, b"cAX", b"cAXY", b"cZ"]
    # The branches first and the main chain last: the slot is left holding the main chain.
    assert prompts(nested_groups([one_token(p) for p in tree])) == [[b"cZ"], [b"cAX", b"cAXY"], chain]
    # As deep as the main chain: the one asked first is the main chain.
    tie = [b"c", b"cA", b"cAB", b"cABC", b"cAX", b"cAXY"]
    assert prompts(nested_groups([one_token(p) for p in tie])) == [[b"cAX", b"cAXY"], [b"c", b"cA", b"cAB", b"cABC"]]


def test_requests_that_are_not_one_token_never_join_a_group() -> None:
    standard, burst = one_token(b"cA and more", num_predict=64), [one_token(b"c"), one_token(b"cA")]
    assert prompts(nested_groups([standard, *burst])) == [[b"c", b"cA"], [b"cA and more"]]


def test_a_branch_piece_that_begins_the_main_chains_piece_is_not_its_parent() -> None:
    """Seen with a cross-tokenizer draft model: main pieces g reet `, you; a branch "`" at 2. The main
    chain's node after "`," must continue the node after "reet", not the branch's "`"."""
    main = [b"c", b"cg", b"cgreet", b"cgreet`,", b"cgreet`, you"]
    groups = nested_groups([one_token(p) for p in [*main, b"cgreet`"]])
    assert prompts(groups) == [[b"cgreet`"], main]


def test_requests_that_continue_no_slot_evict_short_caches_before_an_agent_s_long_prompt() -> None:
    agent = slot(0, SYSTEM + b"<|user|>" + b"Tool: read_file(path) reads a file. " * 600, used=1)
    chats = [slot(seq, SYSTEM + f"<|user|>Title {seq}<|end|>".encode(), used=seq + 1) for seq in (1, 2, 3)]
    for asked in range(3):  # side requests between two of the agent's turns: its slot was used longest ago
        chosen = idle_slot([agent, *chats], f"<|user|>Side request {asked}<|end|>".encode())
        assert chosen is not agent
        chosen.used = 10 + asked
