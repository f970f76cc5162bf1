#!/usr/bin/env bash
# Builds the independent reference (llama.cpp through the llama-cpp-python package from PyPI) into
# a private virtual environment outside the product, for producing golden data and for side-by-side
# benchmarks. Never linked into kvchat. Usage: tests/reference/setup_reference.sh [VENV_DIR]
set -euo pipefail
VENV=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/kvchat/reference-venv}
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
if ! "$VENV/bin/python" -c 'import llama_cpp' 2>/dev/null; then
  # Every SIMD extension this CPU runs (AVX2, AVX-512 with VNNI/BF16/VBMI), but not AMX: the
  # machines here list amx flags yet fault on tile instructions (SIGILL in ggml's AMX matmul), so a
  # -march=native build crashes.
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON \
    -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$VENV/bin/pip" install --no-binary llama-cpp-python 'llama-cpp-python==0.3.36'
fi
echo "$VENV/bin/python"
