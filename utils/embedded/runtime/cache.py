"""What a model's KV cache holds, as tokens and as text, and how a new prompt is tokenized against it.

Tokenization follows the cache and costs what is new. The prompt's bytes are compared with the
cached text (one memcmp), the cached tokens inside the common prefix are kept, and only the new text
is tokenized, from a few tokens back so that a word the new text continues comes out as a fresh
tokenization has it (" wor" + "ld" becomes " world"). Where the model itself chose the token at a
position (it generated it, or answered a validator request there) and the text goes on with that
token, the model's token wins: a speculative context stays on the target's own token sequence
instead of a re-tokenization of its text.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate, islice
from typing import overload

# Tokens before the end of the common prefix that are tokenized again with the new text; doubled
# while the first IN_STEP of them do not come out as cached (the tokenizer was not in step there).
RETOKENIZE_BACK = 8
IN_STEP = 2


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int, start: int = 0) -> int:
    """How many leading items a and b share (at most `limit`), knowing the first `start` agree;
    compared in slices so that a long agreement costs C time, not a Python loop per item."""
    limit = min(limit, len(a), len(b))
    i = min(start, limit)
    while i < limit:
        j = min(i + 256, limit)
        if a[i:j] == b[i:j]:
            i = j
            continue
        while a[i] == b[i]:
            i += 1
        return i
    return limit


def common_bytes(a: bytes | bytearray, b: bytes | bytearray) -> int:
    """Length of the common prefix of two byte strings (memcmp, then halving)."""
    if a.startswith(b):
        return len(b)
    low, high = 0, min(len(a), len(b))  # a[:low] == b[:low], and a[:high] != b[:high] unless equal
    if a[:high] == b[:high]:
        return high
    while high - low > 1:
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    return low


class Prefix(Sequence[int]):
    """The first `length` token ids of `items` (all of them by default), without a copy: the tokens
    of a validator group's nested prompts, each the one before it plus a drafted piece, are
    prefixes of one list. A slice is a list."""

    __slots__ = ("items", "length")

    def __init__(self, items: list[int], length: int | None = None):
        self.items, self.length = items, len(items) if length is None else length

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return self.items[slice(*index.indices(self.length))]
        if not -self.length <= index < self.length:
            raise IndexError("token index out of range")
        return self.items[index % self.length]

    def __iter__(self) -> Iterator[int]:
        return islice(self.items, self.length)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and self[:] == list(other)

    def __repr__(self) -> str:
        return f"Prefix({self[:]!r})"


class TokenCache:
    """The tokens whose keys and values are in the KV cache, where each one's text ends, that text,
    and the tokens the model chose itself (position -> token, -1 for none; at most one position past
    the cache: the token sampled last, not evaluated yet).

    `tokenize(text, add_bos)` is the model's tokenizer (special tokens parsed).
    """

    def __init__(self, pieces: list[bytes], tokenize: Callable[[bytes, bool], list[int]], adds_bos: bool,
                 bos: int):
        self.pieces, self._tokenize, self.adds_bos, self.bos = pieces, tokenize, adds_bos, bos
        self.piece_length = [len(piece) for piece in pieces]
        self.tokens: list[int] = []
        self.ends: list[int] = []
        self.text = bytearray()
        self.version = 0  # counts truncations: a prefix of the cache stays as it is between them
        # Positions before `settled` were decided by a tokenization whose text went on for at least
        # RETOKENIZE_BACK tokens after them: what a prompt's walk decides there cannot change while
        # the prompt shares the text that far. Tokens appended without a walk (generated ones, the
        # drafts of a nested group) follow the text's end, which may tokenize otherwise with them.
        self.settled = 0
        self.chosen: list[int] = []
        self.conflicts: set[int] = set()  # cached positions where the model chose another token

    def start(self, position: int) -> int:
        """Where the text of cached position `position` begins."""
        return self.ends[position - 1] if position else 0

    def length(self, position: int, token: int) -> int:
        """Bytes of prompt text that `token` stands for at `position` (a tokenizer's BOS: none)."""
        return 0 if position == 0 and self.adds_bos and token == self.bos else self.piece_length[token]

    # -- tokenizing a prompt ------------------------------------------------------------------------

    def after(self, tokens: Sequence[int], text: bytes, length: int) -> Prefix:
        """Tokens for `text`, continuing `tokens` (whose text is its first `length` bytes). When
        `tokens` is a Prefix of a whole list, the new tokens are appended to that list, which the next
        prompt of a nested group extends in turn: no prompt's tokens are copied (at 4,000 tokens, the
        copies of a K = 4 burst cost 45 us)."""
        if not tokens:
            return Prefix(self._tokenize(text, True))
        if isinstance(tokens, Prefix) and len(tokens) == len(tokens.items):
            items = tokens.items
        else:
            items = list(tokens)
        rest = text[length:]
        if rest:
            items += self._tokenize(rest, False)
        return Prefix(items)

    def tokenize(self, text: bytes) -> tuple[list[int], int]:
        """(tokens of `text`, how many of them are the cache's own leading tokens).

        The result is what a walk from the first position gives: a position keeps the token the
        model chose there if the text goes on with it, else the cached token while everything kept
        agrees with a fresh tokenization of `text`; after the first position that keeps neither, the
        text is tokenized afresh (all of it if everything kept agreed with the fresh tokenization,
        else the rest after what was kept). The walk needs only the last few tokens of the common
        prefix, since before them the cached tokens are the fresh ones (tokenized from the same text)
        or the model's own: the work is a memcmp, a bisection and one tokenization of the new text
        plus RETOKENIZE_BACK tokens, taken further back only while those do not come out as cached.
        """
        cached, chosen = self.tokens, self.chosen
        n = bisect_right(self.ends, common_bytes(text, self.text))  # cached tokens wholly inside the common text
        for position in sorted(self.conflicts):  # the model chose another token than the cache's, early
            if position >= min(n - RETOKENIZE_BACK, self.settled):
                break
            token = chosen[position]
            if self.pieces[token] and text.startswith(self.pieces[token], self.start(position)):
                kept = cached[:position] + [token]
                return self._then(kept, text, self.start(position) + self.piece_length[token]), position
        back = RETOKENIZE_BACK
        while True:
            first = max(min(n - back, self.settled - back + RETOKENIZE_BACK), 0)
            offset = self.start(first)
            window = self._tokenize(text[offset:], first == 0) if len(text) > offset or first == 0 else []
            position, on_fresh, taken = first, True, False
            while True:
                own = chosen[position] if position < len(chosen) else -1
                here = cached[position] if position < len(cached) else -1
                fresh = window[position - first] if position - first < len(window) else -1
                if own >= 0 and self.pieces[own] and text.startswith(self.pieces[own], offset):
                    choice = own
                elif on_fresh and position < n and here >= 0 and here == fresh:
                    choice = here
                else:
                    break
                on_fresh = on_fresh and choice == fresh
                offset += self.length(position, choice)
                position += 1
                if choice != here:
                    taken = True  # past here the cache holds another text
                    break
            if on_fresh and first > 0 and position < n and position - first < IN_STEP:
                back *= 2  # out of step at the window's start: look further back
                continue
            reuse = position - taken
            if on_fresh:
                return cached[:first] + window, reuse
            kept = cached[:reuse] + ([chosen[reuse]] if taken else [])
            return self._then(kept, text, offset), reuse

    def _then(self, kept: list[int], text: bytes, offset: int) -> list[int]:
        """`kept`, then the rest of `text` from `offset` tokenized on its own."""
        rest = text[offset:]
        return kept + self._tokenize(rest, False) if rest else kept

    # -- keeping it in step with the KV cache ---------------------------------------------------------

    def settle(self, walked: int) -> None:
        """The cache now begins with the `walked` tokens a `tokenize` gave."""
        self.settled = max(walked - RETOKENIZE_BACK, 0)

    def truncate(self, keep: int) -> None:
        """Forget cached positions from `keep` on, and the model's choices past `keep`."""
        if keep < len(self.tokens):
            del self.tokens[keep:]
            del self.ends[keep:]
            del self.text[self.start(keep):]
            self.conflicts = {p for p in self.conflicts if p < keep}
            self.version += 1
        del self.chosen[keep + 1 :]

    def extend(self, tokens: Sequence[int]) -> None:
        """`tokens` were evaluated after the cached ones."""
        start = len(self.tokens)
        lengths = [self.piece_length[t] for t in tokens]
        if start == 0 and tokens:
            lengths[0] = self.length(0, tokens[0])
        self.tokens.extend(tokens)
        self.ends.extend(list(accumulate(lengths, initial=self.start(start)))[1:])
        self.text += b"".join(self.pieces[t] if size else b"" for t, size in zip(tokens, lengths))
        for position in range(start, min(len(self.tokens), len(self.chosen))):
            self._note(position)

    def choose(self, position: int, token: int) -> None:
        """The model chose `token` at `position`."""
        if position >= len(self.chosen):
            self.chosen.extend([-1] * (position + 1 - len(self.chosen)))
        self.chosen[position] = token
        self._note(position)

    def _note(self, position: int) -> None:
        token = self.chosen[position]
        if token >= 0 and position < len(self.tokens) and token != self.tokens[position]:
            self.conflicts.add(position)
        else:
            self.conflicts.discard(position)
