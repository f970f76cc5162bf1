#!/usr/bin/env python3
"""A tiny SentencePiece tokenizer.model, like a Hugging Face model folder has, and golden data.

Trains a BPE model with byte fallback on tiny_tokenizer_corpus.txt (beside this script) with
python sentencepiece, and records how python sentencepiece tokenizes a few strings. The corpus
is English, so Chinese, Japanese and emoji fall back to byte tokens, which the streaming
detokenizer test needs. "<start_of_turn>"/"<end_of_turn>" are control symbols; "<br>" is an
ordinary user-defined symbol and "<start_of_image>" a user-defined marker, which the C++
tokenizer turns into a control piece (so no golden string below contains it). Full-width
letters are normalized to ASCII by a precompiled charsmap.

Needs: pip install sentencepiece
Usage: make_tiny_tokenizer.py  (writes tests/data/tiny_tokenizer.model and tiny_tokenizer_golden.json)
"""
import json
import os
import tempfile

import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")

TEXTS = [
    "",
    "Hello world!",
    "The cache keeps the keys and values.",
    "  extra   spaces are   removed  ",
    "Numbers 2024 and 3.14",
    "<br> stays one piece",
    "<start_of_turn>user\nHi<end_of_turn>",
    "Café naïve",
    "Ｆｕｌｌｗｉｄｔｈ Ｌｅｔｔｅｒｓ",
    "你好，世界",
    "日本語のテキスト",
    "emoji \U0001f999\U0001f600 and \u2764\ufe0f",
    "tab\there",
]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "tiny")
        rules = os.path.join(tmp, "fullwidth.tsv")
        with open(rules, "w") as f:
            for a, b in ((0xFF21, 0x41), (0xFF41, 0x61)):
                for k in range(26):
                    f.write(f"{a + k:04X}\t{b + k:04X}\n")
        spm.SentencePieceTrainer.train(
            input=os.path.join(HERE, "tiny_tokenizer_corpus.txt"),
            model_prefix=prefix,
            model_type="bpe",
            vocab_size=400,
            byte_fallback=True,
            character_coverage=1.0,
            split_digits=True,
            # A small rule table (full-width Latin letters to ASCII) instead of NFKC keeps the
            # model a few KB and still gives it a precompiled charsmap; the default removal of
            # extra whitespace stays on. The test checks that from_file keeps both.
            normalization_rule_tsv=rules,
            control_symbols=["<start_of_turn>", "<end_of_turn>"],
            user_defined_symbols=["<br>", "<start_of_image>"],
            num_threads=1,
            minloglevel=2,
        )
        with open(prefix + ".model", "rb") as f:
            model = f.read()
    with open(os.path.join(DATA, "tiny_tokenizer.model"), "wb") as f:
        f.write(model)

    sp = spm.SentencePieceProcessor(model_proto=model)
    cases = []
    for text in TEXTS:
        ids = sp.EncodeAsIds(text)
        cases.append({"text": text, "ids": ids, "pieces": [sp.IdToPiece(i) for i in ids],
                      "decoded": sp.DecodeIds(ids)})
    out = {
        "source": "tests/reference/make_tiny_tokenizer.py with python sentencepiece " + spm.__version__,
        "vocab_size": sp.GetPieceSize(),
        "bos": sp.bos_id(), "eos": sp.eos_id(), "unk": sp.unk_id(), "pad": sp.pad_id(),
        "start_of_turn": sp.PieceToId("<start_of_turn>"),
        "end_of_turn": sp.PieceToId("<end_of_turn>"),
        "start_of_image": sp.PieceToId("<start_of_image>"),
        "br": sp.PieceToId("<br>"),
    }
    body = ",\n  ".join(json.dumps(c, ensure_ascii=False) for c in cases)
    head = json.dumps(out, ensure_ascii=False, indent=1)[:-2]
    with open(os.path.join(DATA, "tiny_tokenizer_golden.json"), "w", encoding="utf-8") as f:
        f.write(head + ',\n "cases": [\n  ' + body + "\n ]\n}\n")


if __name__ == "__main__":
    main()
