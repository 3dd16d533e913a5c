"""Drafts are cut as the target cuts text (utils/engine/pieces.py): the merges and pre-tokenizer the
embedded server lists in a verbose /api/show (as Ollama does) give llama.cpp's own tokenization, and
the target's greedy tokens of a copy are the pieces its tokenizer makes of the text it copies."""

from __future__ import annotations

import json

import pytest
from llama_cpp import Llama

from config import get_settings
from tests.support.models import ROOT, SMALL, TARGET
from utils.embedded.runtime import model_file
from utils.embedded.store.models import ModelStore
from utils.engine.client import OllamaClient
from utils.engine.pieces import Pieces, byte_decoder
from utils.engine.tokenizers import vocabulary

FILE = json.loads((ROOT / "prompts" / "agents.jsonl").read_text().splitlines()[0])["results"][0]["content"]


def texts() -> list[str]:
    """The agent workload's tool results and tasks: code, test output, JSON and prose."""
    found = []
    for line in (ROOT / "prompts" / "agents.jsonl").read_text().splitlines():
        session = json.loads(line)
        found += [session["task"], session["system"], *(result["content"] for result in session["results"])]
    return [*found, "héllo wörld, 1234567 tabs\t\there  \n\n  trailing   "]


async def pieces_of(server_url: str, model: str) -> Pieces:
    client = OllamaClient(server_url)
    try:
        return (await vocabulary(client, model))[1]
    finally:
        await client.aclose()


@pytest.mark.parametrize("model", [TARGET, SMALL])
async def test_the_cut_is_llama_cpps_tokenization(server_url: str, model: str) -> None:
    pieces = await pieces_of(server_url, model)
    assert pieces.bpe  # qwen2 and smollm: merges and a known pre-tokenizer
    path = ModelStore(get_settings().models_dir).path(model)
    tokenizer = Llama(str(path), vocab_only=True, verbose=False)
    written, decode = model_file.read(path).vocabulary, byte_decoder()  # a token's bytes, as the file writes it
    try:
        for text in texts():
            tokens = tokenizer.tokenize(text.encode(), add_bos=False, special=False)
            expected = [bytes(decode[char] for char in written[token]) for token in tokens]
            assert [piece.encode() for piece in pieces.cut(text)] == expected, text[:60]
    finally:
        tokenizer.close()


async def test_the_targets_tokens_of_a_copy_are_its_tokenizers_pieces(server_url: str) -> None:
    client = OllamaClient(server_url)
    try:
        pieces = (await vocabulary(client, TARGET))[1]
        messages = [{"role": "user", "content": f"Repeat this file exactly, nothing else:\n\n{FILE}"}]
        prompt = await client.render_chat(TARGET, messages, {})
        written = [chunk.text async for chunk in client.stream_raw(TARGET, prompt, {"temperature": 0,
                                                                                    "num_predict": 96})]
    finally:
        await client.aclose()
    text = "".join(written)
    assert text.count("\n") > 5  # it copies the file's lines
    assert pieces.after(prompt, text, len(written)) == [piece for piece in written if piece]
    # Cut by the longest piece (what a drafter without the merges does), the same text differs.
    assert Pieces(pieces.vocabulary).after(prompt, text, len(written)) != [piece for piece in written if piece]
