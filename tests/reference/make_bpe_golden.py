#!/usr/bin/env python3
"""Golden token ids for byte-level BPE vocabularies from llama.cpp (llama-cpp-python), for
tests/model/test_bpe_tokenizer.cpp.

Every text is tokenized the way llama.cpp tokenizes text a user typed: no BOS, parse_special off
(Llama(path, vocab_only=True).tokenize(bytes, add_bos=False, special=False)), so control pieces
typed in the text stay text and user-defined pieces ("<think>") are matched. Vocabularies:
  - smollm2: SmolLM2-135M-Instruct (pre-tokenizer "smollm"), the model file itself;
  - qwen2:   DeepSeek-R1-Distill-Qwen-7B's Qwen 2 vocabulary (pre-tokenizer "deepseek-r1-qwen"), a
             vocabulary-only GGUF made by make_vocab_only_gguf.py;
  - tiny:    a small vocabulary this script trains and writes to tests/data/bpe_tiny_vocab.gguf
             (control, user-defined and unused pieces, a merge whose result is no token, tokens no
             merge reaches), tokenized once per supported pre-tokenizer name, so every
             pre-tokenizer is checked against llama.cpp without its model.
The corpus: English, code, accents and combining marks, CJK, other scripts, emoji, numbers and
long digit runs, whitespace runs, tabs and newlines, typed special pieces, control characters,
invalid UTF-8, chunks of this repository's README and sources, and 150 random texts made of tricky
pieces (RANDOM_PIECES, a fixed seed); for the real vocabularies also
each of their control and user-defined pieces typed inside text. The texts are stored with the ids
(as hex when they are not UTF-8), so the test needs nothing but this file and the vocabularies.

Needs the reference environment (tests/reference/setup_reference.sh) with the `gguf` package.
The JSON is stored zlib-compressed as Qt's qCompress writes it (a 4-byte big-endian length, then
the zlib stream), which the test reads with qUncompress.
Usage: make_bpe_golden.py [SMOLLM2.gguf] [QWEN2_VOCAB.gguf]
  defaults: ~/.local/share/kvchat/models/smollm2-135m-instruct-q4_1.gguf and
            ~/.local/share/kvchat/vocab/deepseek-r1-distill-qwen-7b.vocab.gguf
Writes tests/data/bpe_golden.json.zlib and tests/data/bpe_tiny_vocab.gguf.
"""
import collections
import hashlib
import json
import os
import random
import re
import struct
import sys
import tempfile
import zlib

import gguf
import llama_cpp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
DATA = os.path.join(HERE, "..", "data")
SMOLLM2 = os.path.expanduser("~/.local/share/kvchat/models/smollm2-135m-instruct-q4_1.gguf")
QWEN2 = os.path.expanduser("~/.local/share/kvchat/vocab/deepseek-r1-distill-qwen-7b.vocab.gguf")
PRE_TOKENIZERS = ["default", "gpt-2", "smollm", "llama-bpe", "qwen2", "deepseek-r1-qwen", "deepseek-llm", "tekken"]

TEXTS = [
    "",
    " ",
    "Hello world!",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure it's fine; they'll say we'd've done it. DON'T SHOUT, I'M HERE. 'tis the season's end",
    "Café naïve façade résumé Ångström Ærø déjà-vu São Paulo Zürich crème brûlée",
    "decomposed: e\u0301 a\u0308 n\u0303 and precomposed: é ä ñ",
    "你好，世界！这是一个测试。",
    "日本語のテキストとカタカナ、ひらがな。",
    "안녕하세요 세계",
    "Ελληνικά κείμενα, Привет мир, مرحبا بالعالم, नमस्ते दुनिया, สวัสดีชาวโลก, שלום עולם",
    "👋🌍 🇫🇷 👨‍👩‍👧 ❤️ 🦙🐍 emoji after words🙂 and 🙂before",
    "1234567890 3.14159 1,000,000 2024-11-25 0x1F 007 -42 +7 1e-9",
    "12345678901234567890123456789012345678901234567890",
    "a  b   c    d     e",
    "  leading spaces",
    "trailing spaces   ",
    "tabs\t\tand\nnewlines\n\n\nend",
    "\r\n windows line\r\nends \r\n",
    "   \n   \n\t\n",
    "\u00a0no-break\u00a0space\u3000ideographic\u2009thin\u202fnarrow",
    "next line\u0085and\u2028line\u2029paragraph\u180emongolian",
    "U+180E is no whitespace: !\u180e!?\u180e\u180e, \u180e  \u180e",
    "Hello!!! ??? ... --- *** ### $$$ @user #tag 50% a+b=c <tag> {x} [y] (z) ~tilde `code` ^caret |pipe \\back",
    "∑ x² ≤ ∞ → ★ © ® ™ ½ ≠ ±",
    "ﬁ ligature, ＡＢＣ ｆｕｌｌｗｉｄｔｈ ！？（） ‘single’ “double” 「括弧」",
    "https://example.com/path?q=1&x=y user@example.org C:\\Users\\me",
    "HelloWorld camelCase snake_case SCREAMING_CASE McDonald iPhone ÉCOLE école ΑΒΓ αβγ",
    "control\x00chars\x01\x1f\x7f here",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|> and <|end_of_text|> and <|eot_id|> typed",
    "<think>some reasoning</think>The answer.",
    "<tool_call>{\"name\": \"f\"}</tool_call><tool>x</tool>",
    "<|fim_prefix|>def f(<|fim_suffix|>):<|fim_middle|>",
    "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><｜end▁of▁sentence｜>",
    "<<|im_start|>> <|im_start <im_start|> |im_start|",
    "zz zzz zzzz zzzzz xyzzy plugh Xyzzy",
    "def reverse(s: str) -> str:\n    \"\"\"Reverse a string.\"\"\"\n    return s[::-1]\n\n\nprint(reverse('hello'))\n",
    "int main() {\n\tfor (int i = 0; i < 10; ++i) {\n\t\tprintf(\"%d\\n\", i);\n\t}\n\treturn 0;\n}\n",
    "{\"key\": [1, 2.5, true, null], \"nested\": {\"a\": \"b\"}}",
    "SELECT * FROM users WHERE id = 42 AND name LIKE '%o''brien%';",
    " " * 40 + "x",
    " " * 100 + "x",
    "\n" * 12,
    "\t" * 7 + "tabbed",
    "9" * 300,
    "a" * 200,
    "z" * 81,
    "word " * 30,
]

INVALID = [
    b"\xff\xfe invalid",
    b"abc\xe2\x82",
    b"\xe2\x82abc",
    b"\xc0\x80 overlong \xe0\x80\x80 \xc1\xbf",
    b"\xed\xa0\x80 surrogate \xed\xbf\xbf",
    b"\xe2\x82\xac\x80\x80",
    b"\xf0\x9f\x98 cut emoji",
    b"caf\xe9 latin-1",
    b"\x80\x81\x82 continuation",
    b"mixed \xf8\x88\x80\x80\x80 five \xfe\xff",
]


# Pieces random texts are made of: letters of several scripts and cases (titlecase, modifier
# letters), combining marks, digits of other scripts, number-like symbols, every kind of space and
# line break (U+180E and U+0085 included), contractions, punctuation and symbols, typed special and
# user-defined pieces and their fragments, emoji with joiners, and invalid or cut UTF-8.
RANDOM_PIECES = [
    b"a", b"Z", b"q", "\u00e9".encode(), "e\u0301".encode(), "\u00df".encode(), "\u01c5".encode(), "\u02b0".encode(),
    "\u2102".encode(), "\u65e5".encode(), "\u672c".encode(), "\ud55c".encode(), "\u0436".encode(), "\u0627".encode(),
    "\u0e2a".encode(), "\u0915\u094d".encode(), b"1", b"12", b"123", "\u0663".encode(), "\u00bd".encode(),
    "\u00b2".encode(), "\u216b".encode(), b" ", b"  ", b"\t", b"\n", b"\r\n", b"\r", "\u00a0".encode(),
    "\u3000".encode(), "\u180e".encode(), "\u0085".encode(), "\u2028".encode(), b"'s", b"'S", b"'ll", b"'Re",
    b"'", b"!", b"...", b"-", b"_", b"$", b"+", b"<", b"|", b">", b"/", b"\\", "\uff01".encode(),
    "\u201c".encode(), "\u3002".encode(), b"<think>", b"</think>", b"<tool_call>", b"<tool", b"<|im_start|>",
    b"<|im_end|>", b"<s>", b"<|fim_prefix|>", "\U0001f642".encode(), "\U0001f468\u200d\U0001f469".encode(),
    "\ufe0f".encode(), b"\x00", b"\x7f", b"\xff", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf", b"\x80",
    b"zz", b"xyzzy", b"Hello", b"world", b"the", b"ing", b"McD", b"iPhone",
]


def random_texts(count, seed=20):
    rng = random.Random(seed)
    return [b"".join(rng.choice(RANDOM_PIECES) for _ in range(rng.randint(1, 24))) for _ in range(count)]


def repository_chunks():
    """Chunks of real prose and code from this repository (stored in the golden, so later edits of
    these files do not matter)."""
    chunks = []
    for rel, size in [("README.md", 1500), ("engine/tokenizer/spm_vocab.cpp", 1200),
                      ("tests/reference/make_vocab_only_gguf.py", 1200), ("packaging/kvchat.sh", 1000)]:
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            text = f.read()
        for start in range(0, min(len(text), size * 6), size):
            chunks.append(text[start:start + size])
    return chunks


def entry(text):
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"hex": data.hex()}


def text_bytes(e):
    return e["text"].encode("utf-8") if "text" in e else bytes.fromhex(e["hex"])


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def typed_pieces(llm):
    """Each control, user-defined and unknown piece typed inside text."""
    vocab = llama_cpp.llama_model_get_vocab(llm._model.model)
    out = []
    special = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED | \
        llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
    for i in range(llama_cpp.llama_vocab_n_tokens(vocab)):
        if llama_cpp.llama_vocab_get_attr(vocab, i) & special:
            out.append(b"x" + llama_cpp.llama_vocab_get_text(vocab, i) + b" y")
    return out


def tokenize_all(llm, entries):
    return [llm.tokenize(text_bytes(e), add_bos=False, special=False) for e in entries]


# --- the tiny vocabulary -------------------------------------------------------------------------

def bytes_to_unicode():
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


def train_tiny():
    """Tokens, types and merges of a small byte-level BPE trained on the corpus's English and code."""
    b2u = bytes_to_unicode()
    training = " ".join(t for t in TEXTS if t.startswith(("Hello", "The ", "I'm", "Caf", "def ", "int ", "{", "SELECT")))
    training += " the cache keeps keys and values" * 3
    words = collections.Counter(
        "".join(b2u[b] for b in w.encode("utf-8"))
        for w in re.findall(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+", training))
    specials = [("<|endoftext|>", 3), ("<s>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3),
                ("<think>", 4), ("</think>", 4), ("<tool>", 4), ("<tool_call>", 4),
                ("<|fim_prefix|>", 4),  # user-defined in the file; llama.cpp makes it control
                ("[PAD0]", 5)]
    tokens = [t for t, _ in specials] + [b2u[b] for b in range(256)]
    types = [k for _, k in specials] + [1] * 256
    merges = []
    seqs = {w: list(w) for w in words}
    for _ in range(300):
        pairs = collections.Counter()
        for w, n in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(a + " " + b)
        if a + b not in tokens:
            tokens.append(a + b)
            types.append(1)
        for w in words:
            s, out, i = seqs[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    # "zz" is made by a merge but is no token (its pieces fall back to single characters); "zzz" is.
    assert "zz" not in tokens and not any("zz" in m for m in merges), "the training text has zz"
    merges += ["z z", "zz z"]
    # Whole words no merge reaches: only pre-tokenizers that ignore merges (Llama 3, Tekken) use them.
    for t in ["zzz", "Ġxyzzy", "plugh", "ĠXyzzy"]:
        assert t not in tokens
        tokens.append(t)
        types.append(1)
    return tokens, types, merges


def write_tiny(path, tokens, types, merges, pre, add_bos=None):
    w = gguf.GGUFWriter(path, "llama")
    # What llama.cpp's hyper-parameter loader needs before it reads the vocabulary.
    w.add_context_length(256)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<s>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    smollm2 = sys.argv[1] if len(sys.argv) > 1 else SMOLLM2
    qwen2 = sys.argv[2] if len(sys.argv) > 2 else QWEN2
    # KVCHAT_BPE_RANDOM=N and KVCHAT_BPE_GOLDEN=PATH make a larger golden file for a one-off check
    # (the test reads KVCHAT_BPE_GOLDEN too); the committed one has 150 random texts.
    n_random = int(os.environ.get("KVCHAT_BPE_RANDOM", "150"))
    texts = [entry(t) for t in TEXTS] + [entry(b) for b in INVALID] + [entry(c) for c in repository_chunks()] + \
        [entry(t) for t in random_texts(n_random)]
    out = {"source": "tests/reference/make_bpe_golden.py with llama-cpp-python " + llama_cpp.__version__,
           "texts": texts, "vocabularies": {}}

    for name, path in [("smollm2", smollm2), ("qwen2", qwen2)]:
        llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        extra = [entry(t) for t in typed_pieces(llm)]
        v = {"file": os.path.basename(path), "sha256": sha256(path), "extra_texts": extra,
             "ids": tokenize_all(llm, texts), "extra_ids": tokenize_all(llm, extra),
             "with_bos": llm.tokenize(b"Hello", add_bos=True, special=False)}
        out["vocabularies"][name] = v
        print(name, len(texts) + len(extra), "texts,", sum(map(len, v["ids"] + v["extra_ids"])), "tokens")
        del llm

    tokens, types, merges = train_tiny()
    tiny_path = os.path.join(DATA, "bpe_tiny_vocab.gguf")
    write_tiny(tiny_path, tokens, types, merges, "gpt-2")
    with tempfile.TemporaryDirectory() as tmp:
        for pre in PRE_TOKENIZERS:
            path = os.path.join(tmp, pre + ".gguf")
            write_tiny(path, tokens, types, merges, pre)
            llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
            out["vocabularies"]["tiny/" + pre] = {
                "ids": tokenize_all(llm, texts),
                "with_bos": llm.tokenize(b"Hello", add_bos=True, special=False)}
            del llm
    out["tiny_sha256"] = sha256(tiny_path)

    text = json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    with open(os.environ.get("KVCHAT_BPE_GOLDEN", os.path.join(DATA, "bpe_golden.json.zlib")), "wb") as f:
        f.write(struct.pack(">I", len(text)) + zlib.compress(text, 9))
    print("texts:", len(texts), "json bytes:", len(text))


if __name__ == "__main__":
    main()
