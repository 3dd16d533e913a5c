"""The fast layer ignores the developer's `.env` and SPEC_*/OLLAMA_* variables (tests/unit/conftest.py).

The proof runs where such settings really are: a pytest run in a child process whose environment has
SPEC_K_MAX=3, SPEC_P_MIN=0.9, SPEC_NUM_CTX=512 and an OLLAMA_HOST, and whose working folder (a temp
folder: a test never writes into the repository or the user's folders) holds a `.env` with other
values. First, a plain Python in that same place reads them all (so they would reach the tests);
then pytest runs `test_settings_are_the_defaults` there, and it passes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from config import Settings
from utils.engine.config import EngineConfig

ROOT = Path(__file__).resolve().parents[2]
ENVIRONMENT = {"SPEC_K_MAX": "3", "SPEC_P_MIN": "0.9", "SPEC_NUM_CTX": "512", "OLLAMA_HOST": "http://10.0.0.9:1"}
DOTENV = "SPEC_N_MIN=2\nSPEC_DRAFT_TOP_K=7\nSPEC_TARGET_MODEL=from-dotenv:1b\n"


def default(field: str):
    return EngineConfig.model_fields[field].default


def test_settings_are_the_defaults() -> None:
    settings = Settings()
    assert settings.ollama_host is None and settings.target_model == Settings.model_fields["target_model"].default
    engine = settings.engine
    assert (engine.k_max, engine.p_min, engine.num_ctx, engine.n_min, engine.draft_top_k) == (
        default("k_max"), default("p_min"), default("num_ctx"), default("n_min"), default("draft_top_k"))
    assert EngineConfig() == engine


def test_a_developers_dotenv_and_environment_do_not_reach_the_fast_layer(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(DOTENV)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SPEC_", "OLLAMA_", "PYTEST_"))}
    env.update(ENVIRONMENT)

    # Without the fixture, that folder and environment change the settings.
    read = subprocess.run(
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); from config import Settings; "
         "s = Settings(); e = s.engine; print(e.k_max, e.p_min, e.num_ctx, e.n_min, e.draft_top_k, "
         "s.target_model, s.ollama_host)", str(ROOT)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert read.stdout.split() == ["3", "0.9", "512", "2", "7", "from-dotenv:1b", "http://10.0.0.9:1"], read.stderr

    # With it, the test that expects the defaults passes in the same place.
    test = f"{Path(__file__).resolve()}::test_settings_are_the_defaults"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", test, "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "--rootdir", str(ROOT), "-c", str(ROOT / "pytest.ini")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout + run.stderr
