#!/bin/bash
# kvchat against llama.cpp on the CPU of a borrowed GPU machine (an Intel Xeon with AVX-512 and AMX
# on the team's), which has Python, numpy and jinja2 but neither Qt nor the models, and takes at
# most 64 MiB of files a call. SmolLM2-135M (98 MB) therefore goes over in three calls, each
# copied out of the working tree into /tmp/kvchat-stage (the carried folder is replaced at the
# next call; /tmp stays while the machine is warm, 30 s between calls).
#
#   tests/gpu/device/host_cpu.sh pack     here: .dev/ (libraries, binaries, llama-cpp-python from
#                                         tests/reference/setup_reference.sh, model part 1), .dev2/
#                                         (part 2), .dev3/ (part 3)
#   then, one call right after the other:
#     run(command='bash tests/gpu/device/host_cpu.sh stage .dev',  carry=['.dev'])
#     run(command='bash tests/gpu/device/host_cpu.sh stage .dev2', carry=['.dev2'])
#     run(command='bash tests/gpu/device/host_cpu.sh run', carry=['.dev3'], timeout_s=600)
#   `run`: the kernels' tests on that CPU, then three rounds in turns of `kvchat-cli bench --json`,
#   the same with --simd avx2 (KVCHAT_AVX2_RUNS runs, default 3), and tests/reference/bench_llama_cpp.py, 2 then 1 threads; one JSON
#   line per turn in $OUT/rounds.jsonl, a summary line each on the output.
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
source "$root/tests/gpu/device/bundle_libs.sh"
cd "$root"
model_name=smollm2-135m-instruct-q4_1.gguf
case "${1:-}" in
pack)
    set -e
    build=${2:-build}
    model=$HOME/.local/share/kvchat/models/$model_name
    site=$(${KVCHAT_REF_PYTHON:-/work/ref/venv/bin/python} -c 'import llama_cpp, os; print(os.path.dirname(os.path.dirname(llama_cpp.__file__)))')
    [ -f "$model" ] || { echo "no $model: run packaging/kvchat.sh model" >&2; exit 2; }
    for d in .dev .dev2 .dev3; do grep -qx "/$d/" .git/info/exclude || echo "/$d/" >> .git/info/exclude; rm -rf "$d"; mkdir -p "$d"; done
    tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/b" "$tmp/libs" "$tmp/py"
    bins="bin/kvchat-cli tests/test_matmul tests/test_attention tests/test_q4_1_product tests/test_smollm2_golden"
    for f in $bins; do cp "$build/$f" "$tmp/b/"; done
    strip "$tmp"/b/*
    (cd "$build" && bundle_libs "$tmp/libs" $bins)
    cp -r "$site/llama_cpp" "$site/diskcache" "$tmp/py/"
    find "$tmp/py" -name __pycache__ -prune -exec rm -rf {} +
    tar cf - -C "$tmp" libs b py | xz -T0 -6 > .dev/base.tar.xz
    dd if="$model" of=.dev/model.part bs=1M iflag=count_bytes count=33000000 status=none
    dd if="$model" of=.dev2/model.part bs=1M iflag=skip_bytes,count_bytes skip=33000000 count=50000000 status=none
    dd if="$model" of=.dev3/model.part bs=1M iflag=skip_bytes skip=83000000 status=none
    sha256sum "$model" | cut -c1-64 > .dev3/model.sha256
    du -sh .dev .dev2 .dev3
    ;;
stage)
    stage_carried "$2"
    ;;
run)
    OUT=${OUT:-/tmp/kvchat-host-out}; mkdir -p "$OUT"
    mkdir -p /tmp/kvchat-host && tar xJf "$kvchat_stage/.dev/base.tar.xz" -C /tmp/kvchat-host || exit 1
    export HOME=/tmp/kvchat-host/home QT_QPA_PLATFORM=offscreen LD_LIBRARY_PATH=/tmp/kvchat-host/libs
    M=$HOME/.local/share/kvchat/models/$model_name
    mkdir -p "$(dirname "$M")"
    join_parts "$M" .dev3/model.sha256 "$kvchat_stage/.dev/model.part" "$kvchat_stage/.dev2/model.part" .dev3/model.part || exit 1
    # The tests run kvchat-cli from the build folder they were compiled in.
    [ -e "$root/build/bin/kvchat-cli" ] || { mkdir -p "$root/build/bin" && ln -s /tmp/kvchat-host/b/kvchat-cli "$root/build/bin/kvchat-cli"; }
    B=/tmp/kvchat-host/b
    lscpu | grep -E "Model name|^CPU\(s\)|L2|L3"
    grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -E "avx512|amx|avx_vnni" | tr '\n' ' '; echo
    for t in test_matmul test_attention test_q4_1_product test_smollm2_golden; do
        timeout 240 $B/$t > "$OUT/$t.log" 2>&1; echo "$t exit $? $(grep Totals "$OUT/$t.log")"; grep -E "^FAIL" -A2 "$OUT/$t.log" | head -6
    done
    # KVCHAT_AVX2_RUNS=1: the AVX2 kernels' comparison runs once a turn, so that three rounds fit a
    # call of 600 s on a slow host (two threads read 10-16 GB/s there).
    avx2_runs=${KVCHAT_AVX2_RUNS:-3}
    for round in 1 2 3; do
        for t in 2 1; do
            k=$($B/kvchat-cli bench --model "$M" --threads $t --runs 3 --json 2>/dev/null)
            a=$($B/kvchat-cli bench --model "$M" --threads $t --runs "$avx2_runs" --simd avx2 --json 2>/dev/null)
            l=$(PYTHONPATH=/tmp/kvchat-host/py timeout 150 python3 tests/reference/bench_llama_cpp.py "$M" --threads $t --runs 3 2>>"$OUT/llama_err.log")
            echo "{\"round\":$round,\"threads\":$t,\"k\":${k:-null},\"a\":${a:-null},\"l\":${l:-null}}" | tee -a "$OUT/rounds.jsonl" |
                python3 -c '
import json, sys
d = json.loads(sys.stdin.read()); k, a, l = d["k"], d["a"], d["l"]
g = lambda x, key: round(x[key], 1) if x else None
print(d["round"], d["threads"], "kvchat", g(k, "prefill_tok_s"), g(k, "decode_tok_s"), "share", k and round(k["decode_bandwidth_fraction"], 2),
      "| avx2", g(a, "decode_tok_s"), "| llama.cpp", g(l, "prefill_tok_s"), g(l, "decode_tok_s"))'
        done
    done
    ;;
*)
    echo "usage: tests/gpu/device/host_cpu.sh pack [BUILD] | stage DIR | run" >&2
    exit 2
    ;;
esac
