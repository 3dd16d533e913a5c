# Sourced by the install scripts: the CMake flags every llama.cpp build of this project uses.
#
# The backend: CUDA where an NVIDIA GPU and its compiler are present (nvidia-smi and nvcc on PATH),
# unless SPEC_GPU=0; otherwise the CPU. x86 flags only on x86-64: an ARM or Apple build (Metal is on
# by default on macOS) gets llama.cpp's own defaults. SPEC_CMAKE_ARGS is appended last, so it can add
# or override anything (e.g. "-DCMAKE_CUDA_ARCHITECTURES=90").
llama_flags=""
if [ "${SPEC_GPU:-1}" != 0 ] && command -v nvidia-smi >/dev/null 2>&1 && command -v nvcc >/dev/null 2>&1; then
  llama_flags="-DGGML_CUDA=ON"
fi
case "$(uname -m)" in
  x86_64|amd64)
    # Not -march=native: llama.cpp's AMX path crashes on these CPUs (llama.cpp issue #20824). Portable
    # AVX2 flags, plus AVX-512 where the CPU has it.
    llama_flags="$llama_flags -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
    if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
      llama_flags="$llama_flags -DGGML_AVX512=ON"
      grep -qw avx512vbmi /proc/cpuinfo && llama_flags="$llama_flags -DGGML_AVX512_VBMI=ON"
      grep -qw avx512_vnni /proc/cpuinfo && llama_flags="$llama_flags -DGGML_AVX512_VNNI=ON"
      grep -qw avx512_bf16 /proc/cpuinfo && llama_flags="$llama_flags -DGGML_AVX512_BF16=ON"
    fi
    ;;
esac
# No llamafile matrix kernels: with them llama.cpp computes a row differently inside a batch than
# alone, and greedy speculative answers could part from standard ones at near ties. (The repacked-
# weight and tiled kernels have the same trait; scripts/patches/ makes them batch-invariant.)
llama_flags="${llama_flags# } -DGGML_LLAMAFILE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF ${SPEC_CMAKE_ARGS:-}"
llama_flags="${llama_flags% }"

# Where a wheel built from requirement $1 with flags $2 is kept. The name is made of the version and
# the flags, so a change rebuilds it (pip's own cache would reuse a wheel built with other flags).
wheel_dir() {
  echo "${SPEC_DATA_DIR:-$HOME/.cache/ollama-speculative}/wheels/$(echo "$1 $2" | sha256sum | cut -c1-16)"
}
