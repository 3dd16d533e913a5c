"""A STAND-IN model whose template tags tool calls with a fence the model really writes.

qwen2.5-coder (0.5B and 1.5B) never writes its template's `<tool_call>` tag: asked with tools, greedy, it
answers bare JSON or a ```json fence, whatever the system message (the tag asked for, with an example),
the history (earlier calls, which the template renders in the tag) or a request to repeat a tagged call
says (27 chats on each model, 2026-11-27; after two tagged calls in the history the tag is not among the
first token's three likeliest). Ollama returns such answers as content (recordings 22-28), so no test
of the tag would see a call. This stand-in is qwen2.5-coder:0.5b with its GGUF's own Jinja template, `<tool_call>`
and `</tool_call>` replaced by a ```json fence: the parser's tag becomes "```json" (Ollama's parseTag
reads it from the template, utils/tool_calls.tool_tag), and the model's own fenced answer is a call
that upstream's parser reads as a tagged call.

    with fenced_server(folder, speculation=True, args=("--pair", f"{FENCED}=lookup")) as url:
        ...  # FENCED answers "Read the file calc.py." with a read_file call
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from config import Settings
from tests.support.models import DRAFT
from tests.support.own_server import own_server
from utils.embedded.store.models import ModelStore

FENCED = "stand-in-fenced-calls:latest"
FENCE = "```json"


def fenced(template: str) -> str:
    """`template` with its tool-call tags (and the instructions that name them) as a ```json fence."""
    assert "<tool_call>" in template, "the base template writes no <tool_call> tag"
    return template.replace("</tool_call>", "```").replace("<tool_call>", FENCE).replace("XML tags", "fences")


def write_gguf(path: Path, template: str) -> Path:
    """DRAFT's GGUF (its tensors and metadata, from the installed models) at `path`, its chat template
    replaced by `template`."""
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

    reader = gguf.GGUFReader(ModelStore(Settings().models_dir).path(DRAFT), "r")
    writer = gguf.GGUFWriter(path, arch=reader.get_field(gguf.Keys.General.ARCHITECTURE).contents(),
                             endianess=reader.endianess)
    replaced = {gguf.Keys.Tokenizer.CHAT_TEMPLATE: MetadataDetails(gguf.GGUFValueType.STRING, template)}
    copy_with_new_metadata(reader, writer, replaced, [])
    return path


def gguf_template() -> str:
    """DRAFT's own chat template, from its GGUF (its /api/show has the Ollama library's Go template)."""
    import gguf

    reader = gguf.GGUFReader(ModelStore(Settings().models_dir).path(DRAFT), "r")
    return str(reader.get_field(gguf.Keys.Tokenizer.CHAT_TEMPLATE).contents())


@contextmanager
def fenced_server(folder: Path, speculation: bool = False, args: tuple[str, ...] = ()) -> Iterator[str]:
    """The URL of a server of its own (own_server.py: the user's data folder is never written) that
    has DRAFT and the stand-in FENCED, created through the real /api/create."""
    with own_server(folder, (DRAFT,), speculation, args) as url:
        path = write_gguf(folder / "fenced.gguf", fenced(gguf_template()))
        created = httpx.post(f"{url}/api/create", json={"model": FENCED, "from": str(path), "stream": False},
                             timeout=300)
        created.raise_for_status()
        yield url
