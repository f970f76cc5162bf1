#!/usr/bin/env python3
"""llama.cpp's side of `kvchat-cli bench`: the same prompt (the same English text repeated, cut to
N tokens, BOS first), the same number of greedy decode steps, the same thread count.

    $(tests/reference/setup_reference.sh) tests/reference/bench_llama_cpp.py MODEL.gguf \
        [--threads 2] [--prompt-tokens 512] [--gen-tokens 128] [--runs 3] [--n-ctx 4096]

Prints one JSON object: prefill and decode tokens per second (median of the runs, and each run) for llama.cpp's
default attention and for its flash attention, so the comparison uses llama.cpp's faster setting.
The Python loop adds well under a millisecond per decoded token. The context is 4,096 tokens, as a
chat app would open it (llama.cpp's attention reads only the cells in use, so this costs little).
"""
import argparse
import json
import statistics
import time

import numpy as np
from llama_cpp import Llama

# Must stay identical to kBenchText in engine/generate/comparison.cpp.
BENCH_TEXT = ("The history of the printing press begins in the fifteenth century. Johannes Gutenberg combined "
              "movable metal type, oil-based inks and a wooden press adapted from those used for wine and olive oil. ")


def run(model, threads, n_prompt, n_gen, runs, flash, n_ctx):
    llm = Llama(model_path=model, n_ctx=max(n_ctx, n_prompt + n_gen + 16), n_batch=512, n_ubatch=512, n_threads=threads,
                n_threads_batch=threads, flash_attn=flash, verbose=False)
    text = ""
    toks = []
    while len(toks) < n_prompt:
        text += BENCH_TEXT
        toks = llm.tokenize(text.encode(), add_bos=True, special=False)
    toks = toks[:n_prompt]
    prefill, decode = [], []
    for _ in range(runs + 1):  # the first run warms up
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(toks)
        t1 = time.perf_counter()
        for _ in range(n_gen):
            nxt = int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))))
            llm.eval([nxt])
        t2 = time.perf_counter()
        prefill.append(n_prompt / (t1 - t0))
        decode.append(n_gen / (t2 - t1))
    return prefill[1:], decode[1:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--n-ctx", type=int, default=4096)
    a = ap.parse_args()
    out = {"threads": a.threads, "prompt_tokens": a.prompt_tokens, "gen_tokens": a.gen_tokens, "runs": a.runs,
           "n_ctx": a.n_ctx}
    for flash in (False, True):
        ps, ds = run(a.model, a.threads, a.prompt_tokens, a.gen_tokens, a.runs, flash, a.n_ctx)
        key = "flash_attn" if flash else "default"
        out[key] = {"prefill_tok_s": statistics.median(ps), "decode_tok_s": statistics.median(ds),
                    "prefill_runs_tok_s": ps, "decode_runs_tok_s": ds}
    out["prefill_tok_s"] = max(out["default"]["prefill_tok_s"], out["flash_attn"]["prefill_tok_s"])
    out["decode_tok_s"] = max(out["default"]["decode_tok_s"], out["flash_attn"]["decode_tok_s"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
