#!/usr/bin/env python3
"""Golden token ids for tests/model/test_tokenizer.cpp, made independently of the C++ code.

Reads the SentencePiece vocabulary of a GGUF file with the `gguf` package, builds the
SentencePiece ModelProto with the protobuf classes that python `sentencepiece` ships, and
tokenizes a varied set of strings with python sentencepiece. The conversion rules are the
ones the C++ tokenizer documents (engine/tokenizer/spm_vocab.h); this script is a second,
separate implementation of them, so the C++ test catches mistakes in either.

Needs: pip install gguf numpy sentencepiece protobuf
Usage: make_tokenizer_golden.py [MODEL.gguf] > tests/data/tokenizer_golden.json
"""
import json
import os
import re
import sys

import gguf
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb

DEFAULT_MODEL = os.path.expanduser("~/.local/share/kvchat/models/gemma-3-270m-q4_k_m.gguf")

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

TEXTS = [
    "",
    " ",
    "\n",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "ALL CAPS, lower case and MiXeD cAsE",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "1234567890 3.14159 -42 1,000,000 0x1F",
    "https://example.com/path?q=1&r=two#frag",
    "def main():\n    print(\"hi\")\n    return 0\n",
    "int main() {\n\treturn 0;\n}\n",
    "if (a && b || !c) { x += y << 2; }",
    "你好，世界！今天天气怎么样？",
    "東京は日本の首都です。ひらがなとカタカナ。",
    "안녕하세요 세계",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "Привет, мир!",
    "I \u2764\ufe0f \U0001f999 and \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466!",
    "\U0001f600\U0001f601\U0001f602\U0001f923",
    "\U00020000 \U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522",
    "zero\u200bwidth and control \x01\x02 chars",
    "a  b   c    d     e",
    "  leading spaces",
    "trailing spaces   ",
    "\n\n\nthree newlines\n\n",
    "tab\tand\t\ttabs\t\t\t",
    "mixed \t \n  whitespace \n\t",
    "literal \u2581 lower one eighth block",
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "<bos><eos><pad><unk><mask>",
    "<start_of_image>[multimodal]<end_of_image>",
    "<s> </s> <div>html</div> <br>",
    "<0x41> is not a byte token when typed",
    "<unused0> <unused6241>",
]


def read_vocab(path):
    r = gguf.GGUFReader(path)

    def field(name):
        return r.fields.get(name)

    def scalar(name, default):
        f = field(name)
        return default if f is None else f.parts[f.data[0]][0].item()

    kind = bytes(field("tokenizer.ggml.model").parts[-1]).decode()
    if kind != "llama":
        sys.exit(f"vocabulary type {kind!r} is not SentencePiece")
    f = field("tokenizer.ggml.tokens")
    tokens = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    f = field("tokenizer.ggml.scores")
    scores = [float(f.parts[i][0]) for i in f.data] if f else [0.0] * len(tokens)
    f = field("tokenizer.ggml.token_type")
    types = [int(f.parts[i][0]) for i in f.data] if f else [NORMAL] * len(tokens)
    f = field("tokenizer.ggml.precompiled_charsmap")
    charsmap = bytes(int(f.parts[i][0]) & 0xFF for i in f.data) if f else b""
    return dict(
        tokens=tokens, scores=scores, types=types, charsmap=charsmap,
        bos=scalar("tokenizer.ggml.bos_token_id", -1),
        eos=scalar("tokenizer.ggml.eos_token_id", -1),
        unk=scalar("tokenizer.ggml.unknown_token_id", -1),
        pad=scalar("tokenizer.ggml.padding_token_id", -1),
        add_bos=bool(scalar("tokenizer.ggml.add_bos_token", True)),
        add_space_prefix=bool(scalar("tokenizer.ggml.add_space_prefix", True)),
    )


# Pieces llama.cpp (src/llama-vocab.cpp) types control by name whatever the GGUF says: its
# end-of-turn, end-of-generation and fill-in-the-middle markers. Other user-defined pieces stay
# user-defined and are matched in typed text.
CONTROL_NAMES = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[",
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\uff5cfim\u2581begin\uff5c>", "<PRE>", "\u2581<PRE>",
    "<|code_prefix|>", "<|prefix|>", "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\uff5cfim\u2581hole\uff5c>",
    "<SUF>", "\u2581<SUF>", "<|code_suffix|>", "<|suffix|>", "<|fim_middle|>", "<fim-middle>", "<fim_middle>",
    "<\uff5cfim\u2581end\uff5c>", "<MID>", "\u2581<MID>", "<|code_middle|>", "<|middle|>", "<|fim_pad|>", "<fim-pad>",
    "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
    "<|file_sep|>",
}
BYTE_RE = re.compile(r"^<0x[0-9A-F]{2}>$")


def build_proto(v):
    n = len(v["tokens"])
    special_ids = {v[k] for k in ("bos", "eos", "unk", "pad")}
    for name in ("<start_of_turn>", "<end_of_turn>"):
        if name in v["tokens"]:
            special_ids.add(v["tokens"].index(name))
    # Gemma 4 and PLaMo keep "</s>" as an ordinary piece.
    s_is_text = "<|tool_response>" in v["tokens"] or "<|plamo:eos|>" in v["tokens"]
    unk = v["unk"]
    if not 0 <= unk < n:
        unk = v["types"].index(UNKNOWN)
    m = pb.ModelProto()
    seen = set()
    n_bytes = 0
    for i, (text, score, t) in enumerate(zip(v["tokens"], v["scores"], v["types"])):
        if i == unk:
            t = UNKNOWN
        elif t == UNKNOWN:
            t = CONTROL
        elif (t == USER_DEFINED and i in special_ids) or (
                t in (USER_DEFINED, NORMAL) and text in CONTROL_NAMES and not (text == "</s>" and s_is_text)):
            t = CONTROL
        elif t == USER_DEFINED:
            # GGUF converters store spaces of user-defined pieces as ' '; sentencepiece matches
            # them after whitespace escaping, so give them back their U+2581.
            text = text.replace(" ", "\u2581")
        elif t == BYTE:
            assert BYTE_RE.match(text), text
            n_bytes += 1
        elif t not in (NORMAL, CONTROL, UNUSED):
            t = NORMAL
        if text == "" or text in seen:
            text, t = f"<kvchat unreachable {i}>", (UNKNOWN if t == UNKNOWN else UNUSED)
        seen.add(text)
        p = m.pieces.add()
        p.piece, p.score, p.type = text, score, t
    ts = m.trainer_spec
    ts.model_type = pb.TrainerSpec.BPE
    ts.vocab_size = n
    ts.byte_fallback = n_bytes > 0
    ts.unk_id = unk
    ts.bos_id = v["bos"]
    ts.eos_id = v["eos"]
    ts.pad_id = v["pad"]
    for key, piece_field in (("bos", "bos_piece"), ("eos", "eos_piece"), ("pad", "pad_piece")):
        if 0 <= v[key] < n:
            setattr(ts, piece_field, v["tokens"][v[key]])
    ts.unk_piece = v["tokens"][unk]
    ns = m.normalizer_spec
    ns.name = "identity"
    ns.add_dummy_prefix = v["add_space_prefix"]
    ns.remove_extra_whitespaces = False
    ns.escape_whitespaces = True
    if v["charsmap"]:
        ns.precompiled_charsmap = v["charsmap"]
    return m


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL
    v = read_vocab(path)
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(build_proto(v).SerializeToString())
    cases = [{"text": t, "ids": sp.EncodeAsIds(t)} for t in TEXTS]
    out = {
        "source": "tests/reference/make_tokenizer_golden.py with python sentencepiece " + spm.__version__,
        "model": os.path.basename(path),
        "vocab_size": len(v["tokens"]),
        "bos": v["bos"],
        "add_bos": v["add_bos"],
        "cases": cases,
    }
    # One case per line keeps diffs of the golden file readable.
    body = ",\n  ".join(json.dumps(c, ensure_ascii=False) for c in out.pop("cases"))
    head = json.dumps(out, ensure_ascii=False, indent=1)[:-2]
    sys.stdout.write(head + ',\n "cases": [\n  ' + body + "\n ]\n}\n")


if __name__ == "__main__":
    main()
