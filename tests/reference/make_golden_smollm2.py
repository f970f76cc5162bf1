#!/usr/bin/env python3
"""Golden data for SmolLM2-135M-Instruct (Q4_1 GGUF) from llama.cpp (llama-cpp-python), the
independent reference for the Llama forward pass on a real instruction-tuned model.

Each prompt is a one-message chat rendered with the model's own chat template by jinja2 (ChatML,
with the template's default system message and the assistant's opening), tokenized by llama.cpp
with special tokens parsed (the markers are the template's, not typed text). Kept per prompt:
the token ids, the top-10 logits at every position, and 32 greedy tokens (argmax of the logits,
no sampler, not stopped at <|im_end|>). kvchat's test feeds the same ids, so it checks the forward
pass whether or not its own tokenizer reads this vocabulary. Run with the reference environment
from setup_reference.sh:

    $(tests/reference/setup_reference.sh) tests/reference/make_golden_smollm2.py \
        ~/.local/share/kvchat/models/smollm2-135m-instruct-q4_1.gguf tests/data/golden_smollm2.json
"""
import json
import sys

import jinja2
import numpy as np
from llama_cpp import Llama

PROMPTS = [
    ("greeting", "Hi! How are you today?"),
    ("capital", "What is the capital of France?"),
    ("explain", "Explain in two sentences why the sky is blue."),
    ("code_python", "Write a Python function that returns the n-th Fibonacci number."),
    ("list", "Give me three tips for sleeping better."),
    ("math", "What is 17 times 23?"),
    ("translate", "Translate 'good morning, my friend' into French."),
    ("story", "Tell me a very short story about a cat who learns to fly."),
    ("definition", "What does the word 'ephemeral' mean?"),
    ("advice", "I have an exam tomorrow and I feel nervous. Any advice?"),
    ("compare", "Which is bigger, a whale or an elephant?"),
    ("summary", "Summarize the plot of Romeo and Juliet in one paragraph."),
]

N_GREEDY = 32
TOPK = 10


def main():
    model_path, out_path = sys.argv[1], sys.argv[2]
    llm = Llama(model_path=model_path, n_ctx=2048, n_batch=512, logits_all=True, n_threads=2,
                flash_attn=False, verbose=False, seed=0)
    template = jinja2.Environment().from_string(llm.metadata["tokenizer.chat_template"])
    out = {"model": "smollm2-135m-instruct-q4_1.gguf", "reference": "llama.cpp via llama-cpp-python 0.3.36",
           "flash_attn": False, "topk": TOPK, "prompts": []}
    for name, question in PROMPTS:
        text = template.render(messages=[{"role": "user", "content": question}], add_generation_prompt=True)
        toks = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
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
