"""The GPU path's settings, without a GPU: import order, layer setting, install flags."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_server_loads_llama_cpp_before_numpy():
    """On a CUDA machine image, numpy's libraries loaded before llama.cpp's made model loads crash."""
    code = (
        "import sys, cli\n"
        "from utils.embedded.server import load_app\n"
        "load_app()\n"
        "names = list(sys.modules)\n"
        "print(names.index('llama_cpp.llama_cpp') < names.index('numpy'))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "True", result.stderr


def served_gpu_layers(environment: dict[str, str]) -> int:
    """The layers `cli.py serve`'s server gives each model it loads (LoadedModels passes them to every
    ModelRunner, hence llama.cpp's n_gpu_layers), with SPEC_GPU_LAYERS as in `environment`: serve() run
    in a child process (llama.cpp before numpy, as above), stopped where it would start listening."""
    code = (
        "import uvicorn\n"
        "from config import Settings\n"
        "from utils.embedded import server\n"
        "uvicorn.run = lambda log, **_: print(log.app.state.models.gpu_layers)\n"  # the app inside its request log
        "server.serve('127.0.0.1', 0, Settings())\n"
    )
    env = {key: value for key, value in os.environ.items() if key not in ("SPEC_GPU_LAYERS", "SPEC_PARENT_PID")}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            env={**env, **environment})
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[-1])


def test_gpu_layers_setting_reaches_the_models_the_server_loads():
    """SPEC_GPU_LAYERS, read by Settings, is what the server loads models with: all layers on the GPU
    by default (-1, where the build has one), none with 0, a number as given."""
    assert served_gpu_layers({}) == -1
    assert served_gpu_layers({"SPEC_GPU_LAYERS": "0"}) == 0
    assert served_gpu_layers({"SPEC_GPU_LAYERS": "7"}) == 7
