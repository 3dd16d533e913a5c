"""The proxy changes nothing upstream would have done: the model's own parameters (a Modelfile's
`PARAMETER`s) decide as they do for a direct request, and no request the proxy sends upstream carries
a `num_ctx` the client did not send (Ollama reloads a model whose num_ctx changes).

Client -> proxy -> a recording pass-through (tests/support/tap.py) -> an embedded server with its own
data folder, where models with parameters are created through the real `/api/create`.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import ollama
import pytest

from tests.support.models import DRAFT
from tests.support.own_server import own_server
from tests.support.proxy import running_proxy
from tests.support.tap import Tap

GREEDY_MODEL = "fidelity-greedy"  # PARAMETER temperature 0, PARAMETER stop "def "
SAMPLED_MODEL = "fidelity-sampled"  # PARAMETER temperature 0.7, top_k 20, top_p 0.8
QUESTION = [{"role": "user", "content": "Write two Python functions: one that adds and one that subtracts."}]
REPEATING = [{"role": "user", "content": "Repeat this sentence exactly twice: The quick brown fox jumps over "
                                         "the lazy dog near the river bank."}]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> Iterator[str]:
    """An embedded server with its own data folder, holding two models created FROM the bundled
    Qwen 0.5B with parameters of their own."""
    with own_server(tmp_path_factory.mktemp("fidelity"), (DRAFT,)) as url:
        client = ollama.Client(host=url)
        client.create(model=GREEDY_MODEL, from_=DRAFT, parameters={"temperature": 0, "stop": ["def "]})
        client.create(model=SAMPLED_MODEL, from_=DRAFT, parameters={"temperature": 0.7, "top_k": 20, "top_p": 0.8})
        yield url


@pytest.fixture(scope="module")
def tapped(upstream) -> Iterator[Tap]:
    with Tap(upstream) as tap:
        yield tap


@pytest.fixture(scope="module")
def proxied(tapped) -> Iterator[str]:
    """Prompt lookup for both models, K fixed so that answers are speculated whatever this CPU measures."""
    with running_proxy(tapped.url, "--pair", f"{GREEDY_MODEL}=lookup", "--pair", f"{SAMPLED_MODEL}=lookup",
                       "--k", "3") as url:
        yield url


def chat(url: str, model: str, messages: list[dict], **fields) -> dict:
    response = httpx.post(f"{url}/api/chat", json={"model": model, "messages": messages, "stream": False, **fields},
                          timeout=600)
    assert response.status_code == 200, response.text
    return response.json()


def options_sent(tap: Tap) -> list[dict]:
    """The options of every request the proxy made upstream for text (generate, chat, bursts' parts),
    not those that only ask about a model (`/api/show`, which a first answer for a model sends)."""
    found = []
    for _, path, body in tap.received:
        if path in ("/api/generate", "/api/chat", "/speculative/burst") and isinstance(body, dict):
            found += [part.get("options") or {} for part in body.get("requests") or [body]]
    return found


def test_a_model_made_greedy_by_its_modelfile_answers_as_upstream_does(proxied, tapped, upstream):
    direct = chat(upstream, GREEDY_MODEL, QUESTION, options={"num_predict": 80})
    tapped.clear()
    through = chat(proxied, GREEDY_MODEL, QUESTION, options={"num_predict": 80})
    assert through["speculative"]["method"] == "greedy"  # speculated, and greedy because the model says so
    assert through["message"]["content"] == direct["message"]["content"]
    assert through["done_reason"] == direct["done_reason"] == "stop"  # the Modelfile's stop, where upstream stops
    assert "def " not in through["message"]["content"]
    sent = options_sent(tapped)
    assert sent and not any("temperature" in each and each["temperature"] != 0 for each in sent)
    # The stop is the engine's to apply (the model's here, as upstream would): none is sent upstream.
    assert not any(each.get("stop") for each in sent)


def test_sampled_answers_use_the_models_parameters(proxied, tapped):
    tapped.clear()
    through = chat(proxied, SAMPLED_MODEL, REPEATING, options={"num_predict": 40})
    assert through["speculative"]["method"] == "sample-match"  # sampled: the model's temperature 0.7
    # Upstream sampled with the model's own parameters: the requests that drew the answer's tokens (the
    # seeded one-token verifications and the standard segments) carry none of the proxy's over them.
    # (The engine's own greedy measurements, a probe and a cost check, choose no token of the answer.)
    drawing = [each for each in options_sent(tapped) if "seed" in each or each.get("num_predict") != 1]
    assert drawing
    for each in drawing:
        assert not {"temperature", "top_k", "top_p", "min_p"} & set(each), each


def test_no_request_upstream_carries_a_num_ctx_the_client_did_not_send(proxied, tapped):
    tapped.clear()
    chat(proxied, GREEDY_MODEL, REPEATING, options={"num_predict": 30}, keep_alive="5m")
    client = ollama.Client(host=proxied)
    client.generate(model=GREEDY_MODEL, prompt="def fib(n):", raw=True, options={"num_predict": 20})
    client.generate(model=GREEDY_MODEL, prompt="Say hi", options={"num_predict": 5, "repeat_penalty": 1.2})  # forwarded
    sent = options_sent(tapped)
    assert len(sent) > 5
    assert not [each for each in sent if "num_ctx" in each]


def test_a_num_ctx_the_client_sent_goes_with_every_request(proxied, tapped):
    tapped.clear()
    chat(proxied, GREEDY_MODEL, REPEATING, options={"num_predict": 30, "num_ctx": 4096}, keep_alive="5m")
    sent = options_sent(tapped)
    assert sent and all(each.get("num_ctx") == 4096 for each in sent)
