"""A STAND-IN thinking model for the tests (qwen2.5-coder:0.5b with a Qwen3-style chat template): built
by utils/bench/stand_in.py, which the reasoning benchmark uses too; re-exported here for the tests.

Use it on a server of its own (own_server.py), for example with this fixture in a conftest.py or a
test module:

    @pytest.fixture(scope="module")
    def thinker(tmp_path_factory) -> Iterator[tuple[str, str]]:
        folder = tmp_path_factory.mktemp("thinking")
        with own_server(folder, (DRAFT,)) as url:
            yield url, register(url, write_gguf(folder))
"""

from __future__ import annotations

from utils.bench.stand_in import EXAMPLE, STAND_IN, TEMPLATE, register, write_gguf

__all__ = ["EXAMPLE", "STAND_IN", "TEMPLATE", "register", "write_gguf"]
