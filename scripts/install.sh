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
# Built from the source release with two small patches (scripts/patches/README.md): a switch that
# computes each row of a batch as it would be alone, with repacked weights, which the server keeps on;
# and a C entry point to llama.cpp's own JSON-schema-to-grammar conversion, for `format`.
patches=(scripts/patches/"${engine/==/-}"-*.patch)
wheels=$(wheel_dir "$engine" "$flags $(cat "${patches[@]}" | sha256sum | cut -c1-16)")
if ! ls "$wheels"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  echo "building llama.cpp ($engine, patched): a few minutes on 2 cores, once"
  src=$(mktemp -d)
  trap 'rm -rf "$src"' EXIT
  .venv/bin/python -m pip download --quiet --no-cache-dir --no-deps --no-binary :all: --dest "$src" "$engine"
  tar -xzf "$src"/*.tar.gz -C "$src"
  tree=$(find "$src" -mindepth 1 -maxdepth 1 -type d)
  for patch in "${patches[@]}"; do git -C "$tree" apply "$PWD/$patch"; done
  CMAKE_ARGS="$flags" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    .venv/bin/python -m pip wheel --quiet --no-cache-dir --no-deps --wheel-dir "$wheels" "$tree"
fi
echo "installing Python packages"
.venv/bin/python -m pip install --quiet --find-links "$wheels" -r requirements.txt
# pip sees the same version installed and keeps it: a llama-cpp-python built before this patch (or
# with other flags) is replaced by the wheel built here, which .venv/.llama-cpp-wheel names.
if [ "$(cat .venv/.llama-cpp-wheel 2>/dev/null)" != "$wheels" ]; then
  .venv/bin/python -m pip install --quiet --no-deps --force-reinstall "$wheels"/llama_cpp_python-*.whl
  echo "$wheels" > .venv/.llama-cpp-wheel
fi

if [ -n "${OLLAMA_HOST:-}" ] && [ -z "${SPEC_FORCE_MODELS:-}" ]; then
  echo "OLLAMA_HOST=$OLLAMA_HOST: using that server, no bundled model installed"
else
  .venv/bin/python cli.py models install
fi
