"""The model-free parts of issue 12's server behaviours: Ollama's name rules, keep_alive durations, CORS
origins, and the library of registered files (with small files that start like a GGUF; nothing loads)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from utils.api.cors import origins_pattern
from utils.api.http import ApiError
from utils.embedded.http.management import read_modelfile
from utils.embedded.runtime.residency import FOREVER, keep_alive_seconds, parse_duration
from utils.embedded.store.library import LibraryError, copy_model, delete_model, find_blob, import_ollama, register_file
from utils.embedded.store.models import ModelError, ModelStore
from utils.embedded.store.names import canonical, not_found


@pytest.mark.parametrize("name, expected", [
    ("smollm2:135m", "smollm2:135m"), ("SmolLM2:135M", "smollm2:135m"), (" smollm2:135m ", "smollm2:135m"),
    ("library/smollm2:135m", "smollm2:135m"), ("registry.ollama.ai/library/smollm2:135m", "smollm2:135m"),
    ("smollm2", "smollm2:latest"), ("someone/model:v2", "someone/model:v2"),
    ("registry.ollama.ai/someone/model", "someone/model:latest"), ("localhost:5000/a/b:c", "localhost:5000/a/b:c"),
    ("", None), ("..", None), ("./smollm2:135m", None), ("smollm2:135m/", None), ("smollm2:135m:latest", None),
    ("../../etc/passwd", None), ("/etc/passwd", None), ("a/b/c/d:e", None), ("smollm2:135m\x00", None),
    ("~/x", None), ("%2e%2e", None), ("a" * 300, None), ("smol lm", None),
])
def test_canonical_names_follow_ollama(name, expected):
    assert canonical(name) == expected


def test_not_found_names_the_installed_tags_of_the_family():
    installed = ["smollm2:135m", "qwen2.5-coder:0.5b", "qwen2.5-coder:1.5b"]
    assert not_found("smollm2", installed) == ("model 'smollm2' not found (a name without a tag means "
                                               "smollm2:latest); installed: smollm2:135m")
    assert not_found("qwen2.5-coder:7b", installed).endswith("installed: qwen2.5-coder:0.5b, qwen2.5-coder:1.5b")
    assert not_found("nosuch", installed) == "model 'nosuch' not found"
    assert not_found("../x", installed) == "model '../x' not found"


@pytest.mark.parametrize("value, seconds", [
    ("5m", 300), ("1h30m", 5400), ("10s", 10), ("1.5h", 5400), ("0", 0), ("250ms", 0.25), (90, 90), (0, 0),
    (2.5, 2.5), (-1, FOREVER), ("-1m", FOREVER), ("-1", None), (None, 300),
])
def test_keep_alive_reads_seconds_and_go_durations(value, seconds):
    if seconds is None:  # a bare string number is not a Go duration
        with pytest.raises(ApiError):
            keep_alive_seconds(value, 300)
        return
    assert keep_alive_seconds(value, 300) == seconds


@pytest.mark.parametrize("value", ["soon", "5 m", "m", "", True, "1d", float("nan")])
def test_keep_alive_refuses_what_is_not_a_duration(value):
    with pytest.raises(ApiError) as refused:
        keep_alive_seconds(value, 300)
    assert refused.value.status == 400


def test_parse_duration_signs():
    assert parse_duration("-5m") == -300 and parse_duration("+2s") == 2 and math.isinf(keep_alive_seconds("-0.5s", 1))


def test_cors_origins_add_wildcards_to_ollamas_defaults():
    pattern = re.compile(origins_pattern(["https://chat.example", "chrome-extension://*"]))
    for allowed in ("http://localhost", "http://localhost:3000", "https://127.0.0.1:8080", "http://[::1]:1",
                    "app://x", "vscode-webview://abc", "https://chat.example", "chrome-extension://abcdef"):
        assert pattern.fullmatch(allowed), allowed
    for refused in ("https://evil.example", "https://chat.example.evil", "http://localhost.evil.com"):
        assert not pattern.fullmatch(refused), refused
    assert re.compile(origins_pattern(["*"])).fullmatch("https://anything.example")


def gguf(path: Path, payload: bytes = b"weights") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF" + payload)
    return path


def test_register_copy_and_delete_never_touch_a_users_file(tmp_path):
    store = ModelStore(tmp_path / "models")
    mine = gguf(tmp_path / "user" / "mine.gguf")
    spec = register_file(store, "Mine:V1", mine, "test")
    assert spec.name == "mine:v1" and spec.registered and store.path("mine:v1") == mine.resolve()
    assert store.is_installed("library/mine:v1") and [s.name for s in store.installed()] == ["mine:v1"]
    store.verify("mine:v1")  # stamped at registration, under our own folder
    assert not (mine.parent / "mine.gguf.verified").exists()
    assert find_blob(store, f"sha256:{spec.sha256}") == mine.resolve()
    copy_model(store, "mine:v1", "other")  # a user's file: the copy points at it too
    assert store.path("other:latest") == mine.resolve()
    delete_model(store, "mine:v1")
    delete_model(store, "other")
    assert mine.read_bytes() == b"GGUFweights" and store.registry.names() == []
    with pytest.raises(ModelError):
        store.spec("mine:v1")


def test_copies_of_our_own_files_are_links_deleted_with_the_last_name(tmp_path):
    store = ModelStore(tmp_path / "models")
    spec = store.catalogue["smollm2:135m"]
    # A stand-in for the installed file (same size on disk is not needed: the copy never checks it).
    our = gguf(store.models_dir / spec.file)
    store.registry.put("stand-in:1", our, our.stat().st_size, "ab" * 32, "test")
    copy_model(store, "stand-in:1", "copy:1")
    copy_model(store, "stand-in:1", "copy:2")
    blob = store.models_dir / "blobs" / f"sha256-{'ab' * 32}"
    assert store.path("copy:1") == blob == store.path("copy:2") and blob.stat().st_nlink >= 2
    delete_model(store, "copy:1")
    assert blob.exists()
    delete_model(store, "copy:2")
    assert not blob.exists() and our.exists()


def test_refusals_of_the_library(tmp_path):
    store = ModelStore(tmp_path / "models")
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    for call, words in (
        (lambda: register_file(store, "x", text, "t"), "not a GGUF file"),
        (lambda: register_file(store, "x", tmp_path / "absent.gguf", "t"), "no such file"),
        (lambda: register_file(store, "../x", gguf(tmp_path / "a.gguf"), "t"), "invalid"),
        (lambda: register_file(store, "smollm2:135m", gguf(tmp_path / "a.gguf"), "t"), "catalogue model"),
        (lambda: copy_model(store, "nosuch:1", "y"), "not found"),
        (lambda: delete_model(store, "nosuch:1"), "not found"),
        (lambda: delete_model(store, "smollm2:135m"), "not found"),  # in the catalogue, not installed
        (lambda: import_ollama(store, tmp_path / "empty"), "not an Ollama models folder"),
    ):
        with pytest.raises(LibraryError) as refused:
            call()
        assert words in str(refused.value)


def test_import_ollama_reads_manifests_and_uses_blobs_in_place(tmp_path):
    store = ModelStore(tmp_path / "models")
    folder = tmp_path / "ollama"
    blob = gguf(folder / "blobs" / f"sha256-{'cd' * 32}")

    def manifest(path: str, layers: list[dict]) -> None:
        target = folder / "manifests" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))

    model = {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{'cd' * 32}", "size": 11}
    manifest("registry.ollama.ai/library/tiny/latest", [model])
    manifest("registry.ollama.ai/library/gone/1b", [{**model, "digest": f"sha256:{'ef' * 32}"}])
    manifest("registry.ollama.ai/library/lora/1b", [model, {"mediaType": "application/vnd.ollama.image.adapter"}])
    manifest("registry.ollama.ai/library/weird/1b", [{"mediaType": "application/vnd.ollama.image.template"}])
    (folder / "manifests" / "registry.ollama.ai" / "library" / "broken").mkdir()
    (folder / "manifests" / "registry.ollama.ai" / "library" / "broken" / "1b").write_text("{not json")
    notes = {item.name: item.note for item in import_ollama(store, folder)}
    assert notes["tiny:latest"].startswith("registered")
    assert "missing" in notes["gone:1b"] and "LoRA adapter" in notes["lora:1b"]
    assert "no model layer" in notes["weird:1b"] and "no model layer" in notes["broken:1b"]
    assert store.registry.names() == ["tiny:latest"] and store.path("tiny") == blob.resolve()


def test_a_modelfile_may_only_say_from_and_parameter(tmp_path):
    assert read_modelfile("# a comment\n\nFROM /models/x.gguf\n", None) == ("/models/x.gguf", {})
    assert read_modelfile("from ./x.gguf", str(tmp_path / "Modelfile"))[0] == str(tmp_path / "./x.gguf")
    assert read_modelfile("FROM smollm2:135m", "/somewhere/Modelfile")[0] == "smollm2:135m"
    assert read_modelfile('FROM a\nPARAMETER stop "def "\nparameter temperature 0\nPARAMETER stop <|im_end|>',
                          None) == ("a", {"stop": ["def ", "<|im_end|>"], "temperature": 0.0})
    for text, status in (("FROM a.gguf\nSYSTEM be nice", 501), ("PARAMETER temperature 0", 400), ("", 400),
                         ("FROM a.gguf\nFROM b.gguf", 400), ("FROM a\nPARAMETER colour red", 400),
                         ("FROM a\nPARAMETER num_ctx big", 400)):
        with pytest.raises(ApiError) as refused:
            read_modelfile(text, None)
        assert refused.value.status == status
