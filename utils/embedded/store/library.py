"""Changing what the store serves beyond the catalogue: register a user's GGUF, copy, delete, and
register the models of an existing Ollama installation (its manifests and blobs, used in place).

Files a user owns (their GGUF, Ollama's blobs) are never written, moved or deleted: deleting such a
model removes its name only. Copies of files inside the models folder are hard links under
`blobs/sha256-<hex>` (no second copy on disk), deleted with the last name that uses them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from utils.embedded.store import names
from utils.embedded.store.models import ModelError, ModelSpec, ModelStore

GGUF_MAGIC = b"GGUF"
MODEL_LAYER = "application/vnd.ollama.image.model"
# Layers that change what the model computes; a model that has one cannot be served from its GGUF alone.
UNSUPPORTED_LAYERS = {"application/vnd.ollama.image.projector": "a vision projector",
                      "application/vnd.ollama.image.adapter": "a LoRA adapter"}
# Layers of Ollama's own prompt handling; the embedded server uses the GGUF's chat template instead.
IGNORED_LAYERS = {"application/vnd.ollama.image.template": "template",
                  "application/vnd.ollama.image.system": "system prompt",
                  "application/vnd.ollama.image.params": "parameters",
                  "application/vnd.ollama.image.messages": "messages",
                  "application/vnd.ollama.image.license": None}
DEFAULT_OLLAMA_DIR = Path.home() / ".ollama" / "models"


class LibraryError(ModelError):
    """A refused change, with the HTTP status Ollama answers it with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message, status)


def _new_name(store: ModelStore, name: str, role: str = "name") -> str:
    wanted = names.canonical(name)
    if wanted is None:
        raise LibraryError(f'{role} "{name}" is invalid')
    if wanted in store.catalogue:
        raise LibraryError(f"'{wanted}' is the name of a bundled catalogue model; choose another name")
    return wanted


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def check_gguf(path: Path) -> Path:
    path = path.expanduser().resolve()
    if not path.is_file():
        raise LibraryError(f"no such file: {path}")
    with path.open("rb") as file:
        if file.read(4) != GGUF_MAGIC:
            raise LibraryError(f"{path} is not a GGUF file (it does not start with 'GGUF')")
    return path


def register_file(store: ModelStore, name: str, file: Path, source: str, sha256: str | None = None,
                  parameters: dict[str, Any] | None = None) -> ModelSpec:
    """Serve `file` (a GGUF, used where it is) under `name`, with its Modelfile `parameters` if any.
    The sha256 is computed unless given."""
    wanted = _new_name(store, name)
    path = check_gguf(file)
    known = sha256 is None
    sha256 = sha256 or sha256_of(path)
    store.registry.put(wanted, path, path.stat().st_size, sha256, source, parameters)
    if known:  # just hashed: loading it need not hash it again
        store.mark_verified(wanted)
    return store.spec(wanted)


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def copy_model(store: ModelStore, source: str, destination: str,
               parameters: dict[str, Any] | None = None) -> ModelSpec:
    """Ollama's /api/copy: `destination` serves the same file as `source`, with its parameters, template
    and system prompt; the parameters given here replace the source's of the same name (a create FROM a
    model, as Ollama's setParameters)."""
    try:
        spec = store.spec(source)
    except ModelError:
        raise LibraryError(f'model "{source}" not found', 404) from None
    if not store.is_installed(spec.name):
        raise LibraryError(f'model "{source}" not found', 404)
    wanted = _new_name(store, destination, "destination")
    path = store.path(spec.name)
    if _inside(path, store.models_dir):  # our file: a hard link, so either name can be deleted alone
        blob = store.models_dir / "blobs" / f"sha256-{spec.sha256}"
        if not blob.exists():
            blob.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, blob)
            except OSError:
                shutil.copyfile(path, blob)
        path = blob
    store.registry.put(wanted, path, spec.size, spec.sha256, f"a copy of {spec.name}",
                       {**spec.parameters, **(parameters or {})}, spec.template, spec.system)
    return store.spec(wanted)


def delete_model(store: ModelStore, name: str) -> ModelSpec:
    """Ollama's /api/delete. A catalogue model's file is deleted (install it again to get it back); a
    registered name is forgotten, and its file deleted only if it is our own blob no other name uses."""
    try:
        spec = store.spec(name)
    except ModelError:
        raise LibraryError(f"model '{name}' not found", 404) from None
    if not spec.registered:
        if not store.is_installed(spec.name):
            raise LibraryError(f"model '{name}' not found", 404)
        store.path(spec.name).unlink()
        store.stamp_path(spec).unlink(missing_ok=True)
        return spec
    store.registry.remove(spec.name)
    path = Path(spec.file)
    still_used = any(entry["path"] == spec.file for entry in store.registry.entries().values())
    if not still_used and _inside(path, store.models_dir / "blobs"):
        path.unlink(missing_ok=True)
    return spec


@dataclass
class Imported:
    name: str
    note: str  # what was done, or why not


def import_ollama(store: ModelStore, folder: Path = DEFAULT_OLLAMA_DIR) -> list[Imported]:
    """Register every model of an Ollama models folder (manifests/HOST/NAMESPACE/MODEL/TAG and
    blobs/sha256-HEX), using its blobs where they are."""
    manifests = folder.expanduser() / "manifests"
    if not manifests.is_dir():
        raise LibraryError(f"{folder} is not an Ollama models folder: it has no manifests/ folder")
    done: list[Imported] = []
    for manifest in sorted(p for p in manifests.glob("*/*/*/*") if p.is_file()):
        host, namespace, model, tag = manifest.relative_to(manifests).parts
        name = names.canonical(f"{host}/{namespace}/{model}:{tag}") or f"{host}/{namespace}/{model}:{tag}"
        done.append(Imported(name, _import_one(store, folder.expanduser(), manifest, name)))
    return done


def _import_one(store: ModelStore, folder: Path, manifest: Path, name: str) -> str:
    try:
        layers = json.loads(manifest.read_text())["layers"]
        kinds = {layer["mediaType"] for layer in layers}
        model = next(layer for layer in layers if layer["mediaType"] == MODEL_LAYER)
    except (ValueError, KeyError, TypeError, StopIteration):
        return "skipped: the manifest has no model layer"
    if blocked := [what for kind, what in UNSUPPORTED_LAYERS.items() if kind in kinds]:
        return f"skipped: it needs {' and '.join(blocked)}, which the embedded server cannot apply"
    digest = str(model.get("digest", ""))
    blob = folder / "blobs" / digest.replace(":", "-")
    if not digest.startswith("sha256:") or not blob.is_file():
        return f"skipped: its model blob {blob} is missing"
    try:
        register_file(store, name, blob, f"Ollama ({manifest})", sha256=digest.removeprefix("sha256:"))
    except LibraryError as error:
        return f"skipped: {error}"
    ignored = [what for kind, what in IGNORED_LAYERS.items() if kind in kinds and what]
    note = f"registered ({blob})"
    if ignored:
        note += f"; its Ollama {', '.join(ignored)} layer is not used: the GGUF's own chat template is"
    return note


def find_blob(store: ModelStore, digest: str) -> Path | None:
    """The installed or registered GGUF whose sha256 is `digest` ("sha256:<hex>"), if any."""
    hexdigest = digest.removeprefix("sha256:").lower()
    for spec in store.installed():
        if spec.sha256 == hexdigest:
            return store.path(spec.name)
    return None
