#!/bin/bash
# test_cuda_backend on a borrowed GPU machine that has the CUDA driver, CMake and ctest but
# neither Qt nor the models, and takes at most 64 MiB of files.
#
#   tests/gpu/device/check.sh pack [BUILD]   here: bundles BUILD (default build-cuda, configured
#       with -DKVCHAT_CUDA=ON): test_cuda_backend, kvchat-cli and libkvchat_cuda.so stripped, the
#       shared libraries they need beside the C library, a CTest file for the suite, and a
#       6-layer cut of the installed SmolLM2 (token embeddings re-quantized to Q4_1: ~33 MB)
#       into .dev/pack.tar.xz (.dev/ is listed in .git/info/exclude). With
#       KVCHAT_COMPARE_CUDA_LIBRARY=PATH, another build's libkvchat_cuda.so goes along too and
#       `run` benchmarks the two in turns (a change's speed on the GPU, side by side). With
#       KVCHAT_FULL_MODEL=1, the whole SmolLM2 instead of the cut: its first 57 MB in
#       .dev2/model.part, the rest beside the bundle in .dev/ (two calls, below).
#   tests/gpu/device/check.sh stage .dev2    there, the full model's first call: copies the carried
#       part to /tmp/kvchat-stage (kept while the machine is warm: 30 s between calls).
#   tests/gpu/device/check.sh run            there, from the repository root: unpacks the bundle
#       where the suite's compiled-in paths expect it and runs `ctest -R test_cuda_backend`, the
#       suite verbose, kvchat-cli on both devices, `kvchat-cli bench` on both (and the compared
#       library's, in turns), the GPU's operations timed (KVCHAT_CUDA_PROFILE) and
#       compute-sanitizer on the kernel cases; logs into $OUT.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
source "$root/tests/gpu/device/bundle_libs.sh"
cd "$root"
case "${1:-}" in
pack)
    build=${2:-build-cuda}
    [ -f "$build/lib/libkvchat_cuda.so" ] || { echo "no $build/lib/libkvchat_cuda.so: configure with -DKVCHAT_CUDA=ON and build" >&2; exit 2; }
    python=${KVCHAT_REF_PYTHON:-/work/ref/venv/bin/python}
    "$python" -c 'import gguf' 2>/dev/null || { echo "$python has no gguf module (pip install gguf numpy)" >&2; exit 2; }
    model=${KVCHAT_CHAT_MODEL:-$HOME/.local/share/kvchat/models/smollm2-135m-instruct-q4_1.gguf}
    [ -f "$model" ] || { echo "no $model: run packaging/kvchat.sh model" >&2; exit 2; }
    grep -qx '/.dev/' .git/info/exclude 2>/dev/null || echo '/.dev/' >> .git/info/exclude
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage/b/tests" "$stage/b/bin" "$stage/b/lib" "$stage/libs"
    cp "$build/tests/test_cuda_backend" "$stage/b/tests/"
    cp "$build/bin/kvchat-cli" "$stage/b/bin/"
    cp "$build/lib/libkvchat_cuda.so" "$stage/b/lib/"
    if [ -n "${KVCHAT_COMPARE_CUDA_LIBRARY:-}" ]; then
        mkdir -p "$stage/b/compare"
        cp "$KVCHAT_COMPARE_CUDA_LIBRARY" "$stage/b/compare/libkvchat_cuda.so"
    fi
    strip "$stage"/b/*/*
    bundle_libs "$stage/libs" "$build/tests/test_cuda_backend" "$build/bin/kvchat-cli"
    # The suite's CTest entry as this build wrote it (its paths are this checkout's: `run` links them).
    "$python" - "$build" "$stage/b" <<'PY'
import sys
t = open(sys.argv[1] + "/tests/CTestTestfile.cmake").read()
i = t.index("add_test([=[test_cuda_backend]=]")
j = t.find("add_test(", i + 10)
open(sys.argv[2] + "/tests/CTestTestfile.cmake", "w").write(t[i:j if j > 0 else len(t)])
open(sys.argv[2] + "/CTestTestfile.cmake", "w").write('subdirs("tests")\n')
PY
    echo "$root" > "$stage/b/source_dir"
    rm -rf .dev .dev2
    mkdir -p .dev
    if [ -n "${KVCHAT_FULL_MODEL:-}" ]; then
        grep -qx '/.dev2/' .git/info/exclude 2>/dev/null || echo '/.dev2/' >> .git/info/exclude
        mkdir -p .dev2
        dd if="$model" of=.dev2/model.part bs=1M iflag=count_bytes count=57000000 status=none
        dd if="$model" of=.dev/model.rest bs=1M iflag=skip_bytes skip=57000000 status=none
        sha256sum "$model" | cut -c1-64 > .dev/model.sha256
        tar cf - -C "$stage" libs b | xz -T0 -6 > .dev/pack.tar.xz
        du -sh .dev .dev2
        echo "then, one right after the other: run(command='bash tests/gpu/device/check.sh stage .dev2', carry=['.dev2'])"
        echo "                                 run(command='bash tests/gpu/device/check.sh run', carry=['.dev'])"
    else
        "$python" tests/gpu/device/truncate_gguf.py "$model" "$stage/model.gguf" 6
        tar cf - -C "$stage" libs b model.gguf | xz -T0 -6 > .dev/pack.tar.xz
        ls -l .dev/pack.tar.xz
        echo "then: run(command='bash tests/gpu/device/check.sh run', carry=['.dev'])"
    fi
    ;;
stage)
    stage_carried "$2"
    ;;
run)
    (cd .dev && tar xJf pack.tar.xz)
    if [ -f .dev/model.rest ]; then
        join_parts .dev/model.gguf .dev/model.sha256 "$kvchat_stage/.dev2/model.part" .dev/model.rest ||
            { echo "(was .dev2 staged first?)" >&2; exit 1; }
        rm -f .dev/model.rest
    fi
    # The suite was built in $(cat source_dir): make that path lead here.
    src=$(cat .dev/b/source_dir)
    [ -e "$src" ] || { mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"; }
    build_dir=$(sed -n 's/^add_test(\[=\[test_cuda_backend\]=\] "\(.*\)\/tests\/test_cuda_backend").*/\1/p' .dev/b/tests/CTestTestfile.cmake)
    [ -e "$build_dir" ] || ln -s "$root/.dev/b" "$build_dir"
    cublas=$(find /usr/local /opt /usr/lib -name 'libcublas.so.13*' 2>/dev/null | head -1 || true)
    export LD_LIBRARY_PATH=$root/.dev/libs:${cublas%/*}:/usr/local/cuda/lib64
    export KVCHAT_MODEL=$root/.dev/model.gguf HOME=/tmp/kvchat-device-home
    mkdir -p "$HOME"
    OUT=${OUT:-/tmp/kvchat-device-out}
    mkdir -p "$OUT"
    nvidia-smi -L || true
    grep -m1 'model name' /proc/cpuinfo || true
    cd "$build_dir"
    set +e
    timeout 300 ./tests/test_cuda_backend -v1 > "$OUT/verbose.log" 2>&1
    echo "test_cuda_backend exit $?"
    grep -E '^(FAIL|SKIP|Totals)|^   (Actual|Expected|Loc)|terminate|what\(\)' "$OUT/verbose.log" | head -60
    timeout 300 ctest -R test_cuda_backend 2>&1 | tee "$OUT/ctest.log" | tail -4
    for d in cpu cuda; do
        timeout 60 ./bin/kvchat-cli generate --model "$KVCHAT_MODEL" --greedy -n 64 --device $d --prompt "The capital of France is" 2>&1 | tail -2
    done
    bench() {  # label, device, the CUDA library ("": the build's own)
        echo "bench $1:"
        KVCHAT_CUDA_LIBRARY=$3 timeout 120 ./bin/kvchat-cli bench --model "$KVCHAT_MODEL" --device "$2" --runs 3 \
            --prompt-tokens 256 --gen-tokens 128 2>&1 | grep -E '^(prefill|decode)|not usable'
    }
    bench cpu cpu ""
    for round in 1 2; do
        bench "cuda, this build (round $round)" cuda ""
        [ -f compare/libkvchat_cuda.so ] && bench "cuda, compared library (round $round)" cuda "$PWD/compare/libkvchat_cuda.so"
    done
    # Where a decode step's time goes on the GPU, at a short and a longer context.
    for p in 16 512; do
        echo "profile, $p-token prompt, 64 decoded:"
        KVCHAT_CUDA_PROFILE=1 timeout 120 ./bin/kvchat-cli bench --model "$KVCHAT_MODEL" --device cuda --runs 1 \
            --prompt-tokens $p --gen-tokens 64 2>&1 | grep -E '^(decode|CUDA|  [a-z(])' | head -24
    done
    if command -v compute-sanitizer > /dev/null; then
        timeout 200 compute-sanitizer --tool memcheck ./tests/test_cuda_backend elementwiseKernelsMatch matmulMatches \
            ropeAndConversionsAreExact attentionMatches placedWeightsBelongToTheirBackend > "$OUT/memcheck.log" 2>&1
        echo "memcheck exit $?"
        grep -E 'ERROR SUMMARY|Totals' "$OUT/memcheck.log"
    fi
    ;;
*)
    echo "usage: tests/gpu/device/check.sh pack [BUILD] | run" >&2
    exit 2
    ;;
esac
