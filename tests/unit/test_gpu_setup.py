"""The GPU path's settings, without a GPU: import order, layer setting, install flags."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from config import Settings

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


def test_gpu_layers_setting(monkeypatch):
    assert Settings().gpu_layers == -1  # all layers on the GPU when the build has one
    monkeypatch.setenv("SPEC_GPU_LAYERS", "0")
    assert Settings().gpu_layers == 0
