#!/usr/bin/env python3
"""Dumps llama.cpp's intermediate tensors (f32 graph nodes, by name) for one batch of tokens.

    $(tests/reference/setup_reference.sh) tests/reference/dump_llama_cpp_tensors.py MODEL.gguf OUT.npz \
        attn_norm-0,Vcur-0,kqv_out-0,ffn_norm-0,ffn_gate-0,l_out-0,result_norm 2,818,5279,529,7001,563

Names are llama.cpp's graph names (NAME-LAYER), or ALL for every f32 node. POS0=N in the environment
starts the positions at N. PREFILL=N first decodes the first N tokens as one batch (nothing kept), then
the rest one token at a time, as greedy generation does: the tensors kept are those of the last step.
Used to find where kvchat's values first leave llama.cpp's (a diagnostic, not a test input): reads
the nodes through the scheduler's eval callback; ggml_tensor's layout (type at byte 0, ne at 16) is
that of ggml 0.9, llama-cpp-python 0.3.36.
"""
import ctypes
import os
import sys

import numpy as np
import llama_cpp
from llama_cpp import llama_cpp as L


def main():
    model_path, out, names, tokens = sys.argv[1], sys.argv[2], set(sys.argv[3].split(",")), sys.argv[4]
    libdir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    gb = ctypes.CDLL(os.path.join(libdir, "libggml-base.so"))
    gb.ggml_get_name.restype = ctypes.c_char_p
    gb.ggml_get_name.argtypes = [ctypes.c_void_p]
    gb.ggml_get_data.restype = ctypes.c_void_p
    gb.ggml_get_data.argtypes = [ctypes.c_void_p]
    gb.ggml_nelements.restype = ctypes.c_int64
    gb.ggml_nelements.argtypes = [ctypes.c_void_p]
    dumps = {}

    @L.ggml_backend_sched_eval_callback
    def cb(t, ask, _):
        name = gb.ggml_get_name(t).decode()
        if ask:
            return "ALL" in names or name in names
        if ctypes.c_int.from_address(t).value == 0:  # GGML_TYPE_F32; a later node of the same name wins
            n = gb.ggml_nelements(t)
            # A name seen again in the same step (Qcur before and after RoPE) gets #1, #2, ...
            key, k = name, 0
            while key in dumps:
                k += 1
                key = f"{name}#{k}"
            dumps[key] = np.ctypeslib.as_array((ctypes.c_float * n).from_address(gb.ggml_get_data(t))).copy()
            dumps[key + "__ne"] = np.array((ctypes.c_int64 * 4).from_address(t + 16))
        return True

    llm = llama_cpp.Llama(model_path=model_path, n_ctx=2048, n_batch=512, n_threads=2, flash_attn=False,
                          verbose=False)
    # The context parameters make_golden_gemma3.py's Llama used (non-flash attention, n_ubatch 512),
    # not llama_context_default_params(), whose automatic flash attention computes differently.
    params = L.llama_context_params.from_buffer_copy(llm.context_params)
    params.n_threads, params.n_threads_batch = 2, 2
    params.cb_eval = cb
    ctx = L.llama_init_from_model(llm._model.model, params)
    toks = [int(x) for x in tokens.split(",")]
    pos0 = int(os.environ.get("POS0", "0"))
    prefill = int(os.environ.get("PREFILL", "0"))
    steps = [toks] if prefill <= 0 else [toks[:prefill]] + [[t] for t in toks[prefill:]]
    batch = L.llama_batch_init(len(toks), 0, 1)
    at = 0
    for step in steps:
        for i, tk in enumerate(step):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = tk, pos0 + at + i, 1, 1
            batch.seq_id[i][0] = 0
        batch.n_tokens = len(step)
        dumps.clear()
        if L.llama_decode(ctx, batch) != 0:
            sys.exit("llama_decode failed")
        at += len(step)
    np.savez(out, **dumps)
    print(f"{len(dumps) // 2} tensors -> {out}")


if __name__ == "__main__":
    main()
