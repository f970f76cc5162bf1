#!/usr/bin/env bash
# Builds the independent reference (llama.cpp through the llama-cpp-python package from PyPI) into
# a private virtual environment outside the product, for producing golden data and for side-by-side
# benchmarks. Never linked into kvchat.
# Usage: tests/reference/setup_reference.sh [--avx2-only] [VENV_DIR]
#   --avx2-only  build llama.cpp for AVX2 CPUs without AVX-512 (AMD Zen 2/3, Intel Core 12th-14th
#                gen without their AVX-VNNI), to compare with `kvchat-cli bench --simd avx2` on a
#                machine that has AVX-512; default folder .../kvchat/reference-venv-avx2
set -euo pipefail
AVX2_ONLY=0
if [ "${1:-}" = "--avx2-only" ]; then AVX2_ONLY=1; shift; fi
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/kvchat
if [ "$AVX2_ONLY" = 1 ]; then VENV=${1:-$CACHE/reference-venv-avx2}; else VENV=${1:-$CACHE/reference-venv}; fi
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
if ! "$VENV/bin/python" -c 'import llama_cpp' 2>/dev/null; then
  if [ "$AVX2_ONLY" = 1 ]; then
    # Plain AVX2/FMA/F16C: no AVX-512 of any kind, no AVX-VNNI, no AMX, and no -march=native
    # (which would switch them back on here).
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
      -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF \
      -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  else
    # Every SIMD extension this CPU runs (AVX2, AVX-512 with VNNI/BF16/VBMI), but not AMX: the
    # machines here list amx flags yet fault on tile instructions (SIGILL in ggml's AMX matmul), so a
    # -march=native build crashes.
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
      -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON \
      -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  fi
  # --no-cache-dir: pip would otherwise reuse a wheel it built earlier with other CMAKE_ARGS.
  CMAKE_ARGS="$CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "$VENV/bin/pip" install --no-cache-dir --no-binary llama-cpp-python 'llama-cpp-python==0.3.36'
fi
echo "$VENV/bin/python"
