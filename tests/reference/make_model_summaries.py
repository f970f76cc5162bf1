#!/usr/bin/env python3
"""Golden data for engine/model/model_summary (tests/unit/test_model_summary.cpp): what the
reference GGUF reader, gguf-py's GGUFReader (the llama.cpp project's own Python package), reads
from the metadata of the installed models and of the committed tiny models of other
architectures (tests/data/tiny_archs/).

For each file: size and SHA-256 (the test compares only when the file it finds is this one), the
name, architecture, parameter count (every tensor's elements), file type named as llama.cpp's
LlamaFileType (without MOSTLY_/ALL_), the tensor type holding the most parameters, context length,
block count, vocabulary kind, pre-tokenizer and size, and whether a chat template is present.

Needs the reference environment (/work/ref/venv: gguf). Run from the project root:
  /work/ref/venv/bin/python tests/reference/make_model_summaries.py
Writes tests/data/model_summaries.json.
"""
import hashlib
import json
import os
import sys

import gguf
import numpy as np

MODELS = os.path.expanduser("~/.local/share/kvchat/models")
FILES = {
    "smollm2-135m-instruct-q4_1.gguf": os.path.join(MODELS, "smollm2-135m-instruct-q4_1.gguf"),
    "gemma-3-270m-q4_k_m.gguf": os.path.join(MODELS, "gemma-3-270m-q4_k_m.gguf"),
    "tiny_archs/tiny_qwen2.gguf": "tests/data/tiny_archs/tiny_qwen2.gguf",
    "tiny_archs/tiny_phi3.gguf": "tests/data/tiny_archs/tiny_phi3.gguf",
}


def field(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    if f.types and f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
        return len(f.data)
    return int(f.parts[f.data[0]][0])


def summary(path):
    r = gguf.GGUFReader(path)
    arch = field(r, "general.architecture")
    by_type, order = {}, []
    params = 0
    for t in r.tensors:
        n = int(np.prod([int(d) for d in t.shape]))
        params += n
        name = t.tensor_type.name
        if name not in by_type:
            order.append(name)
            by_type[name] = 0
        by_type[name] += n
    dominant = max(order, key=lambda k: (by_type[k], -order.index(k)))
    ft = field(r, "general.file_type")
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return {
        "bytes": os.path.getsize(path),
        "sha256": sha.hexdigest(),
        "name": field(r, "general.name"),
        "architecture": arch,
        "parameters": params,
        "file_type": None if ft is None else gguf.LlamaFileType(ft).name.replace("MOSTLY_", "").replace("ALL_", ""),
        "dominant_type": dominant,
        "context_length": field(r, arch + ".context_length"),
        "layers": field(r, arch + ".block_count"),
        "vocabulary": field(r, "tokenizer.ggml.model"),
        "pre_tokenizer": field(r, "tokenizer.ggml.pre"),
        "vocabulary_size": field(r, "tokenizer.ggml.tokens"),
        "chat_template": field(r, "tokenizer.chat_template") is not None,
    }


def main():
    out = {}
    for key, path in FILES.items():
        if not os.path.exists(path):
            sys.exit(f"missing {path}: install the models first (packaging/kvchat.sh model)")
        out[key] = summary(path)
        print(key, out[key]["parameters"], out[key]["file_type"], out[key]["dominant_type"])
    with open("tests/data/model_summaries.json", "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
