"""`cli.py serve` as an operator sees it, on servers of their own (tests/support/own_server.py): each
request logged as Ollama logs it, `/metrics` with speculation off too, and a model created while the
server runs speculated and described as the model it was made from."""

from __future__ import annotations

import re
import time

import httpx

from tests.support.models import SMALL
from tests.support.own_server import own_server

QUICK = {"temperature": 0, "num_predict": 4}
# gin's line, as Ollama's server writes one per request: time | status | duration | client | request.
GIN = r'^\[GIN\] \d{{4}}/\d\d/\d\d - \d\d:\d\d:\d\d \| {status} \| +[0-9.]+\S+ \| +127\.0\.0\.1 \| {method} +"{path}"$'


def logged(log, status: int, method: str, path: str) -> bool:
    """Whether the log has the request's line, waited for: it is written once the answer is sent."""
    pattern, deadline = GIN.format(status=status, method=method, path=re.escape(path)), time.monotonic() + 60
    while time.monotonic() < deadline:
        if re.search(pattern, log.read_text(errors="replace"), re.M):
            return True
        time.sleep(0.1)
    return False


def test_each_request_is_logged_and_metrics_count_answers_with_speculation_off(tmp_path):
    with own_server(tmp_path, (SMALL,)) as url:  # --no-speculation
        assert httpx.get(f"{url}/api/tags", timeout=30).status_code == 200
        answer = httpx.post(f"{url}/api/generate", json={"model": SMALL, "prompt": "Hi", "options": QUICK,
                                                         "stream": False}, timeout=300)
        assert answer.status_code == 200 and answer.json()["done"]
        assert httpx.post(f"{url}/api/show", json={"model": "no-such-model"}, timeout=30).status_code == 404
        metrics = httpx.get(f"{url}/metrics", timeout=30)
        assert metrics.status_code == 200, metrics.text
        assert 'spec_proxy_requests_total{endpoint="/api/generate",mode="forwarded"} 1' in metrics.text
        assert 'spec_proxy_forwarded_total{endpoint="/api/generate",reason="off"} 1' in metrics.text
        log = tmp_path / "server.log"
        for status, method, path in ((200, "GET", "/api/tags"), (200, "POST", "/api/generate"),
                                     (404, "POST", "/api/show"), (200, "GET", "/metrics")):
            assert logged(log, status, method, path), (method, path, log.read_text(errors="replace")[-2000:])


def test_a_model_created_while_serving_is_speculated_and_described_as_its_base(tmp_path):
    with own_server(tmp_path, (SMALL,), speculation=True) as url:
        created = httpx.post(f"{url}/api/create", json={"model": "small-copy", "from": SMALL, "stream": False},
                             timeout=300)
        assert created.status_code == 200, created.text
        answer = httpx.post(f"{url}/api/generate", json={"model": "small-copy", "prompt": "Hi", "options": QUICK,
                                                         "stream": False}, timeout=300)
        assert answer.status_code == 200 and answer.json()["speculative"]["drafter"] == "suffix", answer.json()
        metrics = httpx.get(f"{url}/metrics", timeout=30).text
        assert 'spec_proxy_requests_total{endpoint="/api/generate",mode="speculative"} 1' in metrics
        assert "no_pair" not in metrics
        listed = {m["model"]: m["details"] for m in httpx.get(f"{url}/api/tags", timeout=30).json()["models"]}
        shown = httpx.post(f"{url}/api/show", json={"model": "small-copy"}, timeout=30).json()["details"]
        for details in (listed["small-copy:latest"], shown):
            assert (details["parameter_size"], details["quantization_level"]) == (
                listed[SMALL]["parameter_size"], listed[SMALL]["quantization_level"]) != ("unknown", "unknown")
