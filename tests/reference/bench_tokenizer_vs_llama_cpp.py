#!/usr/bin/env python3
"""Tokenizer speed, kvchat against llama.cpp, in one run: the same ~1 MB mixed text (written by this
script: this repository's sources and README, and the multilingual, emoji, number and whitespace
texts of make_bpe_golden.py, interleaved), tokenized as user text (no BOS, no special parsing) by
llama.cpp (llama-cpp-python, vocab_only) and by build/tests/bench_tokenizer, in alternating rounds.
Also checks that both give the same ids for the whole text.

    $(tests/reference/setup_reference.sh) tests/reference/bench_tokenizer_vs_llama_cpp.py MODEL.gguf \
        [--bench build/tests/bench_tokenizer] [--rounds 3] [--size 1000000] [--text OUT.txt]

Prints one JSON object: tokens per second (median of each side's runs), MB/s, and whether the ids agree.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import llama_cpp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, HERE)
import make_bpe_golden  # noqa: E402  (its corpus of varied texts)


def mixed_text(size):
    code = []
    for pattern in ("engine/**/*.cpp", "engine/**/*.h", "ui/**/*.cpp", "app/*.cpp", "tests/reference/*.py"):
        for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
            with open(path, encoding="utf-8", errors="replace") as f:
                code.append(f.read())
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        prose = f.read()
    varied = "\n".join(t for t in make_bpe_golden.TEXTS if t)
    parts, i = [], 0
    while sum(map(len, parts)) < size:
        parts += [code[i % len(code)], prose if i % 4 == 0 else "", varied]
        i += 1
    return "\n".join(parts).encode("utf-8")[:size].decode("utf-8", "ignore")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "tests", "bench_tokenizer"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=1000000)
    ap.add_argument("--text")
    a = ap.parse_args()

    text = mixed_text(a.size).encode("utf-8")
    tmp = tempfile.mkdtemp()
    text_path = a.text or os.path.join(tmp, "bench.txt")
    with open(text_path, "wb") as f:
        f.write(text)
    ids_path = os.path.join(tmp, "ids.txt")

    llm = llama_cpp.Llama(model_path=a.model, vocab_only=True, verbose=False)
    llama_runs, kvchat_runs = [], []
    ref = None
    for _ in range(a.rounds):
        for _ in range(3):
            t0 = time.perf_counter()
            ref = llm.tokenize(text, add_bos=False, special=False)
            llama_runs.append(time.perf_counter() - t0)
        out = subprocess.run([a.bench, a.model, text_path, "--runs", "3", "--ids", ids_path],
                             check=True, capture_output=True, text=True).stdout
        kvchat_runs += json.loads(out)["seconds"]
    with open(ids_path) as f:
        ours = [int(line) for line in f]
    first_difference = next((i for i, (x, y) in enumerate(zip(ours, ref)) if x != y),
                            None if len(ours) == len(ref) else min(len(ours), len(ref)))
    lm, km = statistics.median(llama_runs), statistics.median(kvchat_runs)
    print(json.dumps({
        "model": os.path.basename(a.model), "bytes": len(text), "tokens": len(ref),
        "llama_cpp": {"tokens_per_second": round(len(ref) / lm), "mb_per_second": round(len(text) / lm / 1e6, 2),
                      "seconds": [round(s, 4) for s in llama_runs]},
        "kvchat": {"tokens_per_second": round(len(ours) / km), "mb_per_second": round(len(text) / km / 1e6, 2),
                   "seconds": [round(s, 4) for s in kvchat_runs]},
        "ids_identical": first_difference is None, "first_difference": first_difference,
        "llama_cpp_version": llama_cpp.__version__}, indent=1))


if __name__ == "__main__":
    main()
