"""Modelfile parameters on the embedded server as Ollama 0.32.15 has them (recorded in
/work/shared/ollama-recorded, 18-20: `q05-greedy` is FROM qwen2.5-coder:0.5b with temperature 0, stop
"def " and num_ctx 8192): created through ollama-python, a Modelfile and `cli.py models add --param`,
shown in /api/show's text, applied under the request's options. On a server with a data folder of
its own (tests/support/own_server.py): the user's folder is never written.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import ollama
import pytest

from config import Settings
from tests.support.models import DRAFT, ROOT
from tests.support.own_server import own_server
from utils.embedded.store.models import ModelStore

GREEDY = "q05-greedy"
ASK = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
PARAMETERS = {"temperature": 0, "stop": ["def "], "num_ctx": 8192}
# /api/show's `parameters` for them, byte for byte as Ollama wrote it (recorded 18).
SHOWN = 'num_ctx                        8192\nstop                           "def "\ntemperature                    0'


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[str, object]]:
    folder = tmp_path_factory.mktemp("parameters")
    with own_server(folder, (DRAFT,)) as url:
        yield url, folder


def chat(client: ollama.Client, model: str, **options) -> ollama.ChatResponse:
    return client.chat(model=model, messages=ASK, options={"num_predict": 48, **options})


def test_parameters_are_created_shown_and_applied_under_the_options(server):
    url, _ = server
    client = ollama.Client(host=url)
    assert client.create(model=GREEDY, from_=DRAFT, parameters=PARAMETERS).status == "success"
    show = client.show(GREEDY)
    assert show.parameters == SHOWN
    assert show.modelfile.endswith('\nPARAMETER num_ctx 8192\nPARAMETER stop "def "\nPARAMETER temperature 0')
    assert client.show(DRAFT).parameters == ""  # a catalogue model has none

    # No options: greedy, and stopped by the Modelfile's stop (recorded 19), in a context of 8192 (20).
    first, second = chat(client, GREEDY), chat(client, GREEDY)
    assert first.message.content == second.message.content
    assert first.done_reason == "stop" and "def " not in first.message.content and "```python" in first.message.content
    assert {m.model: m.context_length for m in client.ps().models}[f"{GREEDY}:latest"] == 8192
    # ... the very answer of the catalogue model asked with those options.
    assert chat(client, DRAFT, **PARAMETERS).message.content == first.message.content

    # The request's options win: its stop list replaces the model's, its num_ctx is the context.
    unstopped = chat(client, GREEDY, stop=["```\n\n"], num_ctx=2048)
    assert unstopped.message.content.startswith(first.message.content) and "def " in unstopped.message.content
    assert {m.model: m.context_length for m in client.ps().models}[f"{GREEDY}:latest"] == 2048
    client.delete(GREEDY)


def test_a_modelfile_and_the_command_line_give_parameters(server):
    url, folder = server
    client = ollama.Client(host=url)
    modelfile = (f'FROM {DRAFT}\nPARAMETER temperature 0.7\n# two stops\nPARAMETER stop "def "\n'
                 'PARAMETER stop <|im_end|>')
    reply = httpx.post(f"{url}/api/create", json={"model": "from-modelfile", "modelfile": modelfile, "stream": False})
    assert reply.status_code == 200, reply.text
    assert client.show("from-modelfile").parameters == (
        'stop                           "def "\nstop                           "<|im_end|>"\n'
        "temperature                    0.7")
    # A copy made FROM it keeps its parameters, those given replacing the same names.
    client.create(model="from-copy", from_="from-modelfile", parameters={"temperature": 0, "num_ctx": 1024})
    assert client.show("from-copy").parameters.splitlines()[0] == "num_ctx                        1024"
    assert client.show("from-copy").parameters.endswith("temperature                    0")

    installed = ModelStore(Settings().models_dir).path(DRAFT)  # registered where it is, never written
    added = subprocess.run([sys.executable, "cli.py", "models", "add", "by-cli", str(installed),
                            "--param", "temperature=0", "--param", "stop=def "], cwd=ROOT, capture_output=True,
                           text=True, env={**os.environ, "SPEC_DATA_DIR": str(folder)}, timeout=300)
    assert added.returncode == 0, added.stderr
    assert client.show("by-cli").parameters == 'stop                           "def "\ntemperature                    0'
    for name in ("from-modelfile", "from-copy", "by-cli"):
        client.delete(name)


def test_unknown_or_bad_parameters_are_refused(server):
    url, _ = server
    client = ollama.Client(host=url)
    with pytest.raises(ollama.ResponseError) as refused:
        client.create(model="bad", from_=DRAFT, parameters={"colour": "red"})
    assert refused.value.status_code == 400 and refused.value.error == "unknown parameter 'colour'"
    for body, status, words in (
        ({"modelfile": f"FROM {DRAFT}\nPARAMETER colour red"}, 400, "unknown parameter 'colour'"),
        ({"modelfile": f"FROM {DRAFT}\nPARAMETER num_ctx big"}, 400, "invalid int value"),
        ({"from": DRAFT, "parameters": {"top_k": "many"}}, 400, 'option "top_k" must be of type integer'),
        ({"from": DRAFT, "parameters": {"temperature": -1}}, 400, "temperature"),
        ({"modelfile": f"FROM {DRAFT}\nSYSTEM be brief"}, 501, "only FROM and PARAMETER"),
    ):
        reply = httpx.post(f"{url}/api/create", json={"model": "bad", **body, "stream": False})
        assert reply.status_code == status and words in reply.json()["error"], (body, reply.text)
    assert "bad:latest" not in [m.model for m in client.list().models]
