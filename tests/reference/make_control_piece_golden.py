#!/usr/bin/env python3
"""Golden ids for every control, user-defined and unknown piece of a GGUF vocabulary typed inside
user text, from llama.cpp (llama-cpp-python), for tests/model/test_tokenizer.cpp (typedPiecesMatchLlamaCpp).

Each piece P is typed as "x" + P + " y" and tokenized as llama.cpp tokenizes text a user typed:
no BOS, parse_special off, so control pieces are never matched and user-defined pieces are
(as SentencePiece does). The pieces and their kinds are llama.cpp's, after its own retyping
(end-of-generation markers such as "</s>" become control).

Needs the reference environment (tests/reference/setup_reference.sh).
The JSON (600 kB, one piece a line) is stored zlib-compressed as Qt's qCompress writes it (a 4-byte
big-endian length, then the zlib stream), which the test reads with qUncompress.
Usage: make_control_piece_golden.py [MODEL.gguf] [OUT]   (OUT: tests/data/control_piece_golden.json.zlib)
"""
import json
import os
import struct
import sys
import zlib

import llama_cpp

DEFAULT_MODEL = os.path.expanduser("~/.local/share/kvchat/models/gemma-3-270m-q4_k_m.gguf")
KINDS = {
    llama_cpp.LLAMA_TOKEN_ATTR_CONTROL: "control",
    llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED: "user_defined",
    llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN: "unknown",
}
BEFORE, AFTER = "x", " y"


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm._model.model)
    n = llama_cpp.llama_vocab_n_tokens(vocab)
    cases = []
    counts = {}
    for i in range(n):
        attr = llama_cpp.llama_vocab_get_attr(vocab, i)
        kind = next((name for bit, name in KINDS.items() if attr & bit), None)
        if kind is None:
            continue
        counts[kind] = counts.get(kind, 0) + 1
        piece = llama_cpp.llama_vocab_get_text(vocab, i)
        text = BEFORE.encode() + piece + AFTER.encode()
        ids = llm.tokenize(text, add_bos=False, special=False)
        cases.append([i, kind, piece.decode("utf-8", "replace"), ids])
    out = {
        "source": "tests/reference/make_control_piece_golden.py with llama-cpp-python " + llama_cpp.__version__,
        "model": os.path.basename(path),
        "vocab_size": n,
        "typed_as": [BEFORE, AFTER],
        "counts": counts,
    }
    # One piece a line: [id, kind, piece, ids of "x" + piece + " y"].
    head = json.dumps(out, ensure_ascii=False)[:-1]
    body = ",\n".join(json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in cases)
    text = (head + ',"cases":[\n' + body + "\n]}\n").encode("utf-8")
    target = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "data", "control_piece_golden.json.zlib")
    with open(target, "wb") as f:
        f.write(struct.pack(">I", len(text)) + zlib.compress(text, 9))


if __name__ == "__main__":
    main()
