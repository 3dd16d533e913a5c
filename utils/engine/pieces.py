"""How a target cuts text into its tokens, as text: what a model-free drafter's draft must be cut into.

The validator accepts a draft piece only where it equals, as text, the token the target writes there
(validator.py), and a model writes the tokens its tokenizer would have made of the text: a copy of a
file it read comes out cut as the file was cut in its prompt. A byte-level BPE tokenizer (GPT-2's,
Qwen's, Llama 3's, SmolLM's) cuts in two steps, both read from the model's `/api/show` (verbose):
its pre-tokenizer splits the text into words by a regular expression (`tokenizer.ggml.pre` names
which: llama.cpp's `llama-vocab.cpp` holds them, and so does `PRE_TOKENIZERS` here), then each word
is merged pair by pair, the lowest-ranked pair of `tokenizer.ggml.merges` first, as llama.cpp's
`llm_tokenizer_bpe` does.

Cut by the longest piece of the vocabulary at each place instead (what a tokenizer this module does
not know still gets), the same text comes out otherwise wherever BPE does not take the longest
piece: an indented line is "    " + "return" where Qwen writes "   " + " return". On the agent
workload's file writes, qwen2.5-coder:1.5b's answers were cut at 68 places otherwise than its own
tokenizer cuts them in 309 tokens; every such place ends a draft with a rejected piece.

A word's pieces are final once text after it can no longer change them: the pre-tokenizer's last
word may still grow or split with the next character (trailing spaces join the next word), every
earlier one may not (`final`).
"""

from __future__ import annotations

import functools
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain

import regex

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# `tokenizer.ggml.pre` -> the expressions llama.cpp applies in turn (each splits the words the one before
# made), and whether a word that is a token is taken whole before any merge (its `ignore_merges`).
PRE_TOKENIZERS: dict[str, tuple[tuple[str, ...], bool]] = {
    **dict.fromkeys(("qwen2", "stablelm2", "hunyuan"), ((_QWEN2,), False)),
    **dict.fromkeys(("llama-bpe", "llama3", "dbrx", "smaug"), ((_LLAMA3,), True)),
    **dict.fromkeys(("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone"), ((r"\p{N}", _GPT2), False)),
    **dict.fromkeys(("gpt-2", "gpt2", "default", "mpt", "olmo", "jais"), ((_GPT2,), False)),
}
LONGEST_WORD = 256  # characters of a word merged pair by pair; a longer one is cut by the longest piece
WINDOW = 128  # characters of a context read to find where its last word begins (`after`)


@dataclass(eq=False)
class Pieces:
    """The text of a target's tokens and how it cuts text into them: by its BPE where `merges` and a
    known `pre` are given, else by the longest piece of `vocabulary` at each place."""

    vocabulary: set[str]
    merges: list[str] = field(default_factory=list)  # "a b" in the byte-level alphabet, lowest rank first
    pre: str = ""

    def __post_init__(self) -> None:
        self.longest = max((len(piece) for piece in self.vocabulary), default=1)
        self.reach: dict[str, int] = {}  # the longest piece that starts with each two characters
        for piece in self.vocabulary:
            self.reach[piece[:2]] = max(self.reach.get(piece[:2], 0), len(piece))
        self.ordered = sorted(self.vocabulary)  # which pieces begin with a text (`_final_greedy`)
        known = PRE_TOKENIZERS.get(self.pre) if self.merges else None
        self.bpe = known is not None
        expressions, self.whole_words = known or ((), False)
        self.expressions = [regex.compile(expression) for expression in expressions]
        self.ranks = {merge: rank for rank, merge in enumerate(self.merges)}
        self._word = functools.lru_cache(maxsize=1 << 16)(self._merge)

    # -- cutting ---------------------------------------------------------------------------------------

    def cut(self, text: str) -> list[str]:
        """`text` in the target's pieces; a character that is no piece is a piece of its own (it
        matches, but `in self.vocabulary` tells a drafter never to draft it)."""
        return list(self._cut(text))

    def _cut(self, text: str) -> Iterator[str]:
        if not self.bpe:
            yield from self._greedy(text)
            return
        for word in self.words(text):
            yield from self._word(word)

    def after(self, context: str, text: str, k: int) -> list[str]:
        """The first `k` pieces the target would write for `text` right after `context`, up to the first
        that is no piece: `text` is cut with the context's last word, which it may continue (a
        draft that begins with " return" after an indentation), and where the context's own pieces
        end inside one of those, the target's earlier tokens were not its tokenizer's: `text` alone."""
        if self.bpe:
            tail = context[-WINDOW:]
            tail = tail[self.final(tail, 0):]
            at, pieces = 0, self._cut(tail + text)
            for piece in pieces:
                if at == len(tail):
                    return self._drafted(chain([piece], pieces), k)
                if at > len(tail):
                    break
                at += len(piece)
        return self._drafted(self._cut(text), k)

    def final(self, text: str, at: int) -> int:
        """Where the pieces of `text[at:]` that no following text can change end (`at` is where a piece
        begins): the beginning of its last word by BPE, else where a longer piece could still begin."""
        if self.bpe:
            words = self.words(text[at:])
            return len(text) - len(words[-1]) if words else at
        for piece in self._greedy(text[at:]):
            if not self._final_greedy(text, at):
                break
            at += len(piece)
        return at

    def words(self, text: str) -> list[str]:
        """The pre-tokenizer's words: each expression splits the words before it into its matches and
        what lies between them (llama.cpp's `unicode_regex_split`)."""
        words = [text] if text else []
        for expression in self.expressions:
            split: list[str] = []
            for word in words:
                at = 0
                for match in expression.finditer(word):
                    if match.start() > at:
                        split.append(word[at : match.start()])
                    split.append(match.group())
                    at = match.end()
                if at < len(word):
                    split.append(word[at:])
            words = split
        return words

    def _drafted(self, pieces: Iterable[str], k: int) -> list[str]:
        drafted: list[str] = []
        for piece in pieces:
            if len(drafted) == k or piece not in self.vocabulary:
                break
            drafted.append(piece)
        return drafted

    def _merge(self, word: str) -> tuple[str, ...]:
        """One word's pieces: its bytes merged pair by pair, the lowest rank first (leftmost on a tie)."""
        if self.whole_words and word in self.vocabulary:
            return (word,)
        if len(word) > LONGEST_WORD:  # merging is quadratic in a word's length: a run of 10,000 spaces
            return tuple(self._greedy(word))
        parts = [_ENCODE[byte] for byte in word.encode("utf-8", errors="surrogatepass")]
        ranks = self.ranks
        while len(parts) > 1:
            best, where = len(ranks), -1
            for index in range(len(parts) - 1):
                rank = ranks.get(parts[index] + " " + parts[index + 1], best)
                if rank < best:
                    best, where = rank, index
            if where < 0:
                break
            parts[where : where + 2] = [parts[where] + parts[where + 1]]
        return tuple(_texts(parts))

    # -- by the longest piece ----------------------------------------------------------------------

    def _greedy(self, text: str) -> Iterator[str]:
        at = 0
        while at < len(text):
            piece = self.piece(text, at) or text[at]
            yield piece
            at += len(piece)

    def piece(self, text: str, at: int) -> str | None:
        """The longest piece of the vocabulary at `text[at:]` (None: the character is no piece)."""
        for length in range(min(self.reach.get(text[at : at + 2], 1), len(text) - at), 0, -1):
            if text[at : at + length] in self.vocabulary:
                return text[at : at + length]
        return None

    def _final_greedy(self, text: str, at: int) -> bool:
        """Whether the longest piece at `at` stays what it is whatever text follows: no longer piece of
        the vocabulary begins with all of `text[at:]`."""
        if len(text) - at >= max(self.reach.get(text[at : at + 2], 1), 2):
            return True  # every piece that could start here fits
        rest = text[at:]
        after = bisect_right(self.ordered, rest)
        return after == len(self.ordered) or not self.ordered[after].startswith(rest)


def byte_decoder() -> dict[str, int]:
    """GPT-2 byte-level BPE writes each byte as a printable character; this undoes that."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1)
    )
    codes = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return {chr(code): byte for byte, code in zip(printable, codes)}


_DECODE = byte_decoder()
_ENCODE = {byte: char for char, byte in _DECODE.items()}


def _texts(parts: list[str]) -> Iterable[str]:
    """Byte-level pieces as text; pieces that are only part of a character are joined with the ones
    after them until the bytes read as text (no such piece is drafted)."""
    pending = b""
    for part in parts:
        pending += bytes(_DECODE[char] for char in part)
        try:
            text = pending.decode("utf-8")
        except UnicodeDecodeError:
            continue
        pending = b""
        yield text
    if pending:
        yield pending.decode("utf-8", errors="replace")


def as_pieces(vocabulary: set[str] | Pieces) -> Pieces:
    """A drafter's pieces: a bare vocabulary is cut by the longest piece."""
    return vocabulary if isinstance(vocabulary, Pieces) else Pieces(vocabulary)
