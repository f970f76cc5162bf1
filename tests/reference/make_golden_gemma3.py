#!/usr/bin/env python3
"""Golden data for the default model from llama.cpp (llama-cpp-python), the independent reference.

For each prompt: llama.cpp's token ids (BOS added as the model's metadata asks, user text never
parsed for special tokens), the top-10 logits at every position, and 32 greedy tokens (argmax of
the logits, no sampler). Run with the reference environment from setup_reference.sh:

    $(tests/reference/setup_reference.sh) tests/reference/make_golden_gemma3.py MODEL.gguf tests/data/golden_gemma3.json
    $(tests/reference/setup_reference.sh) tests/reference/make_golden_gemma3.py MODEL.gguf tests/data/golden_gemma3_flash.json --flash-attn

The second file is llama.cpp again with its flash-attention path: how far llama.cpp's two attention
paths disagree with each other is the noise floor the test holds kvchat to.
"""
import json
import sys

import numpy as np
from llama_cpp import Llama

LONG = (
    "The history of the printing press begins in the fifteenth century. "
    "Johannes Gutenberg combined movable metal type, oil-based inks and a wooden press "
    "adapted from those used for wine and olive oil. Within decades, print shops spread across Europe, "
    "books became cheaper, literacy rose, and ideas travelled faster than ever before. "
)

PROMPTS = [
    ("english", "The capital of France is"),
    ("story", "Once upon a time, in a small village by the sea, there lived an old fisherman who"),
    ("code_python", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n"),
    ("code_cpp", "#include <vector>\n\nint sum(const std::vector<int>& v) {\n    int s = 0;\n    for (int x : v)"),
    ("chinese", "人工智能是计算机科学的一个分支，它试图理解智能的本质，并"),
    ("japanese", "東京は日本の首都であり、世界で最も人口の多い都市圏の一つです。"),
    ("arabic_russian", "مرحبا بالعالم. Привет, мир! Как дела?"),
    ("emoji", "I love pizza 🍕 and tacos 🌮! The weather today is ☀️ and my mood is 😊👍🏽"),
    ("control_text", "Users sometimes type <start_of_turn>user or <end_of_turn> and <bos> literally; they are text."),
    ("whitespace", "Line one\n\n\tIndented line   with  spaces\n    - bullet\r\nEnd."),
    ("numbers", "3.14159 + 2.71828 = 5.85987; 1,000,000 × 42 = 42,000,000 (approximately)"),
    ("long", LONG * 20 + "In summary, the printing press"),
]

N_GREEDY = 32
TOPK = 10


def main():
    model_path, out_path = sys.argv[1], sys.argv[2]
    flash = "--flash-attn" in sys.argv[3:]
    llm = Llama(model_path=model_path, n_ctx=2048, n_batch=512, logits_all=True, n_threads=2,
                flash_attn=flash, verbose=False, seed=0)
    out = {"model": "gemma-3-270m-q4_k_m.gguf", "reference": "llama.cpp via llama-cpp-python 0.3.36",
           "flash_attn": flash, "topk": TOPK, "prompts": []}
    for name, text in PROMPTS:
        toks = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        llm.reset()
        llm.eval(toks)
        scores = np.array(llm.scores[: len(toks)], dtype=np.float32)
        top_ids, top_vals = [], []
        for row in scores:
            idx = np.argsort(-row, kind="stable")[:TOPK]
            top_ids.append([int(i) for i in idx])
            top_vals.append([round(float(row[i]), 4) for i in idx])
        greedy = []
        last = scores[-1]
        for _ in range(N_GREEDY):
            nxt = int(np.argmax(last))
            greedy.append(nxt)
            llm.eval([nxt])
            last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        out["prompts"].append({"name": name, "text": text, "tokens": [int(t) for t in toks],
                               "top_ids": top_ids, "top_logits": top_vals, "greedy": greedy})
        print(f"{name}: {len(toks)} tokens, greedy {llm.detokenize(greedy)[:60]!r}", file=sys.stderr)
    with open(out_path, "w") as f:
        json.dump(out, f, separators=(",", ":"), ensure_ascii=False)


if __name__ == "__main__":
    main()
