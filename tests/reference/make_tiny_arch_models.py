#!/usr/bin/env python3
"""Tiny random-weight GGUF models of the architectures kvchat runs beside Gemma 3 and Llama 2,
written by the `gguf` package, and llama.cpp's logits and greedy tokens on each (the golden
data test_tiny_archs compares kvchat with).

Every model: 2 layers of width 192, 3 query heads over 1 kv head (grouped-query attention 3:1)
of 64 dimensions, feed-forward 128, a 320-piece SentencePiece vocabulary, tied embeddings (Q8_0),
F32 norms. Matrices are Q4_1 or Q8_0, the types kvchat computes in llama.cpp's order, so the
logits agree to the golden file's rounding. What each one exercises:

    tiny_llama3.gguf  llama with Llama 3's RoPE scaling: rope_freqs.weight divides the
                      frequencies (factors 1..8 as Llama 3.1's converter makes them); Q4_1
    tiny_qwen2.gguf   qwen2: biases on the q, k and v projections; NEOX RoPE; Q8_0
    tiny_qwen3.gguf   qwen3: per-head RMS norms of q and k before RoPE; Q4_1
    tiny_phi3.gguf    phi3: fused attn_qkv and ffn_up holding gate then up; Q8_0

For each model, from llama.cpp (non-flash attention, as the other golden files): the logits of
every position of a 14-token prompt (all 320, rounded to 4 decimals) and 24 greedy tokens. Run
with the reference environment from setup_reference.sh:

    $(tests/reference/setup_reference.sh) tests/reference/make_tiny_arch_models.py tests/data/tiny_archs
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from llama_cpp import Llama

N_LAYER, N_EMBD, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF, N_VOCAB, N_CTX = 2, 192, 3, 1, 64, 128, 320, 512
PROMPT = [2, 270, 271, 272, 9, 40, 273, 274, 100, 275, 276, 7, 262, 300]
N_GREEDY = 24

MODELS = [
    # file, arch, matrix type, seed
    ("tiny_llama3.gguf", "llama", Q.Q4_1, 3),
    ("tiny_qwen2.gguf", "qwen2", Q.Q8_0, 20),
    ("tiny_qwen3.gguf", "qwen3", Q.Q4_1, 30),
    ("tiny_phi3.gguf", "phi3", Q.Q8_0, 33),
]


def add_vocab(w):
    """SentencePiece pieces: <pad> <eos> <bos> <unk>, the 256 byte pieces, a few words, unused."""
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>"]
    types = [3, 3, 3, 2]
    for b in range(256):
        tokens.append("<0x%02X>" % b)
        types.append(6)
    for word in ["\u2581the", "\u2581a", "\u2581cat", "\u2581sat", "\u2581on", "\u2581mat", "\u2581", "the", "a", "e", "t", "h"]:
        tokens.append(word)
        types.append(1)
    while len(tokens) < N_VOCAB:
        tokens.append("<unused%d>" % len(tokens))
        types.append(5)
    scores = [-float(i) if t == 1 else 0.0 for i, t in enumerate(types)]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(True)


def write_model(path, arch, qtype, seed):
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, arch)
    w.add_name("tiny test model")  # a name with "phi3" in it makes llama.cpp look for Phi-3's own tokens
    w.add_block_count(N_LAYER)
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(500000.0 if arch == "llama" else 1000000.0)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if qtype == Q.Q8_0 else gguf.LlamaFileType.MOSTLY_Q4_1)
    add_vocab(w)

    def matrix(name, rows, cols, t=qtype):
        x = rng.normal(0.0, 1.0 / np.sqrt(cols), size=(rows, cols)).astype(np.float32)
        w.add_tensor(name, gguf.quants.quantize(x, t), raw_dtype=t)

    def vector(name, n, lo=0.5, hi=1.5):
        w.add_tensor(name, rng.uniform(lo, hi, size=n).astype(np.float32))

    q_dim, kv_dim = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    matrix("token_embd.weight", N_VOCAB, N_EMBD, Q.Q8_0)  # tied: also the output matrix
    vector("output_norm.weight", N_EMBD)
    if arch == "llama":
        # Llama 3.1's scaling as its converter writes it: factor 1 for high frequencies, the
        # scaling factor 8 for low ones, a smooth ramp between.
        n = HEAD_DIM // 2
        ramp = np.clip((np.arange(n) - n / 4) / (n / 2), 0.0, 1.0)
        w.add_tensor("rope_freqs.weight", (1.0 + 7.0 * ramp).astype(np.float32))
    for i in range(N_LAYER):
        p = "blk.%d." % i
        vector(p + "attn_norm.weight", N_EMBD)
        vector(p + "ffn_norm.weight", N_EMBD)
        if arch == "phi3":
            matrix(p + "attn_qkv.weight", q_dim + 2 * kv_dim, N_EMBD)
            matrix(p + "ffn_up.weight", 2 * N_FF, N_EMBD)
        else:
            matrix(p + "attn_q.weight", q_dim, N_EMBD)
            matrix(p + "attn_k.weight", kv_dim, N_EMBD)
            matrix(p + "attn_v.weight", kv_dim, N_EMBD)
            matrix(p + "ffn_gate.weight", N_FF, N_EMBD)
            matrix(p + "ffn_up.weight", N_FF, N_EMBD)
        matrix(p + "attn_output.weight", N_EMBD, q_dim)
        matrix(p + "ffn_down.weight", N_EMBD, N_FF)
        if arch == "qwen2":
            vector(p + "attn_q.bias", q_dim, -0.5, 0.5)
            vector(p + "attn_k.bias", kv_dim, -0.5, 0.5)
            vector(p + "attn_v.bias", kv_dim, -0.5, 0.5)
        if arch == "qwen3":
            vector(p + "attn_q_norm.weight", HEAD_DIM)
            vector(p + "attn_k_norm.weight", HEAD_DIM)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def golden(path):
    llm = Llama(model_path=path, n_ctx=N_CTX, n_batch=512, logits_all=True, n_threads=2, flash_attn=False,
                verbose=False, seed=0)
    llm.reset()
    llm.eval(PROMPT)
    logits = [[round(float(v), 4) for v in row] for row in np.array(llm.scores[: len(PROMPT)], dtype=np.float32)]
    greedy = []
    last = np.array(llm.scores[len(PROMPT) - 1], dtype=np.float32)
    for _ in range(N_GREEDY):
        nxt = int(np.argmax(last))
        greedy.append(nxt)
        llm.eval([nxt])
        last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    return {"tokens": PROMPT, "logits": logits, "greedy": greedy}


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    result = {"reference": "llama.cpp via llama-cpp-python 0.3.36", "flash_attn": False, "models": {}}
    for name, arch, qtype, seed in MODELS:
        path = os.path.join(out_dir, name)
        write_model(path, arch, qtype, seed)
        result["models"][name] = dict(arch=arch, **golden(path))
        print(f"{name}: {os.path.getsize(path)} bytes, greedy {result['models'][name]['greedy']}", file=sys.stderr)
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump(result, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
