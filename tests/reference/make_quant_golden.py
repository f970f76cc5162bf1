#!/usr/bin/env python3
"""Golden data for tests/unit/test_tensor_type.cpp: GGML block formats decoded and encoded by an
implementation that is not ours.

Reference: the `gguf` Python package (gguf-py, maintained in the llama.cpp repository), whose
gguf.quants module has numpy dequantizers for every format and quantizers for the simple ones.
Two formats it lacks are transcribed below from ggml's C reference (ggml-quants.c), in numpy:
  - Q8_1: gguf-py has no class for it, and its GGML_QUANT_SIZES entry (40 bytes, from the old
    float d/s layout) is stale; ggml's block_q8_1 is two fp16 fields and 32 int8 quants, 36 bytes.
  - Q8_K: only used for activations, so gguf-py has no class; transcribed from
    quantize_row_q8_K_ref / dequantize_row_q8_K. One deliberate difference: for an all-zero
    block ggml leaves bsums unwritten; we expect zeros there.

Every float is written as the hex of its little-endian float32 bits, so the test can compare
exactly and nan/inf survive JSON.

Run:  /tmp/gg/bin/python tests/reference/make_quant_golden.py   (needs numpy and gguf)
"""
import importlib.metadata
import json
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = pathlib.Path(__file__).resolve().parent.parent / "data" / "quant_golden.json"
rng = np.random.default_rng(20240613)

QK_K = 256
# type -> (elements per block, bytes per block), per ggml-common.h
SIZES = {
    T.F32: (1, 4), T.F16: (1, 2), T.BF16: (1, 2),
    T.Q4_0: (32, 18), T.Q4_1: (32, 20), T.Q5_0: (32, 22), T.Q5_1: (32, 24),
    T.Q8_0: (32, 34), T.Q8_1: (32, 36),
    T.Q2_K: (256, 84), T.Q3_K: (256, 110), T.Q4_K: (256, 144), T.Q5_K: (256, 176),
    T.Q6_K: (256, 210), T.Q8_K: (256, 292),
}
# Byte offsets of the fp16 scale fields inside each block; random bytes there would give
# inf/nan or absurd magnitudes, so they are replaced by sane values.
FP16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.Q8_1: [0, 2],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}


def f32_hex(a: np.ndarray) -> str:
    return np.ascontiguousarray(a, dtype="<f4").tobytes().hex()


def sane_fp16(count: int) -> np.ndarray:
    mag = np.exp(rng.uniform(np.log(1e-3), np.log(2.0), count)).astype(np.float32)
    sign = np.where(rng.random(count) < 0.5, -1.0, 1.0).astype(np.float32)
    return (mag * sign).astype(np.float16)


# --- numpy transcriptions of ggml's C reference, for the formats gguf-py lacks --------------

def dequantize_q8_1(raw: np.ndarray) -> np.ndarray:
    blocks = raw.reshape(-1, 36)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    q = blocks[:, 4:].copy().view(np.int8).astype(np.float32)
    return (q * d).reshape(-1)


def quantize_q8_1(x: np.ndarray) -> np.ndarray:
    blocks = x.reshape(-1, 32).astype(np.float32)
    d = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    q = quants.np_roundf(blocks * inv).astype(np.int8)  # roundf: half away from zero
    s = (q.astype(np.int32).sum(axis=1, keepdims=True).astype(np.float32) * d).astype(np.float32)
    out = np.concatenate([d.astype(np.float16).view(np.uint8), s.astype(np.float16).view(np.uint8),
                          q.view(np.uint8)], axis=1)
    return out.reshape(-1)


def dequantize_q8_k(raw: np.ndarray) -> np.ndarray:
    blocks = raw.reshape(-1, 292)
    d = blocks[:, 0:4].copy().view("<f4")
    q = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
    return (d * q).reshape(-1)


def quantize_q8_k(x: np.ndarray) -> np.ndarray:
    out = []
    for blk in x.reshape(-1, QK_K).astype(np.float32):
        i = int(np.argmax(np.abs(blk)))  # first of the largest magnitudes, sign kept
        mx = blk[i]
        if mx == 0:
            d = np.zeros(1, "<f4")
            q = np.zeros(QK_K, np.int8)
        else:
            iscale = np.float32(-127.0) / mx
            v = np.rint(blk * iscale)  # nearest_int: round half to even
            q = np.minimum(v, 127).astype(np.int8)
            d = np.array([np.float32(1.0) / iscale], "<f4")
        bsums = q.astype(np.int32).reshape(16, 16).sum(axis=1).astype("<i2")
        out.append(np.concatenate([d.view(np.uint8), q.view(np.uint8), bsums.view(np.uint8)]))
    return np.concatenate(out)


def dequantize(t: T, raw: np.ndarray) -> np.ndarray:
    if t == T.Q8_1:
        return dequantize_q8_1(raw)
    if t == T.Q8_K:
        return dequantize_q8_k(raw)
    if t == T.BF16:  # gguf-py's BF16 wants whole rows; same formula
        return quants.dequantize(raw.reshape(1, -1), t).reshape(-1)
    return quants.dequantize(raw, t).reshape(-1)


def quantize(t: T, x: np.ndarray) -> np.ndarray:
    if t == T.Q8_1:
        return quantize_q8_1(x)
    if t == T.Q8_K:
        return quantize_q8_k(x)
    return quants.quantize(x.reshape(1, -1), t).reshape(-1).view(np.uint8)


def reference_name(t: T) -> str:
    return "ggml C reference transcribed to numpy" if t in (T.Q8_1, T.Q8_K) else "gguf-py"


# --- dequantization cases: random valid blocks ----------------------------------------------

def random_blocks(t: T, n_blocks: int) -> np.ndarray:
    elems, size = SIZES[t]
    if t == T.F32:
        return rng.standard_normal(n_blocks * elems * 64).astype("<f4").view(np.uint8)
    if t in (T.F16, T.BF16):
        # Every bit pattern is a value here, so random bits cover subnormals, inf and nan too.
        bits = rng.integers(0, 1 << 16, n_blocks * 64, dtype=np.uint16)
        special = [0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x3c00,
                   0x0080, 0x007f, 0x7f7f, 0x7f80, 0xff80, 0x7fc0]
        bits[: len(special)] = special
        return bits.astype("<u2").view(np.uint8)
    raw = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)
    if t == T.Q8_K:
        d = (rng.uniform(1e-3, 0.1, n_blocks) * np.where(rng.random(n_blocks) < 0.5, -1, 1)).astype("<f4")
        raw[:, 0:4] = d.view(np.uint8).reshape(n_blocks, 4)
        # bsums consistent with the quants, as a valid block has them
        q = raw[:, 4:260].copy().view(np.int8).astype(np.int32)
        raw[:, 260:292] = q.reshape(n_blocks, 16, 16).sum(axis=2).astype("<i2").view(np.uint8)
    for off in FP16_FIELDS.get(t, []):
        raw[:, off:off + 2] = sane_fp16(n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(-1)


def dequantize_cases() -> list:
    cases = []
    for t in SIZES:
        elems, _ = SIZES[t]
        n_blocks = 3 if elems == QK_K else (6 if elems == 32 else 1)
        raw = random_blocks(t, n_blocks)
        values = dequantize(t, raw).astype(np.float32)
        n = values.size
        assert raw.size == n // elems * SIZES[t][1]
        cases.append({"type": t.name, "type_id": int(t), "n": int(n), "reference": reference_name(t),
                      "bytes_hex": raw.tobytes().hex(), "values_f32_hex": f32_hex(values)})
    return cases


# --- quantization cases: float vectors through the reference quantizers ---------------------

def vector_for(t: T, elems: int) -> np.ndarray:
    if elems == 1:
        x = (rng.standard_normal(256) * np.exp(rng.uniform(-12, 12, 256))).astype(np.float32)
        # Exact ties and range edges for the fp16/bf16 rounding.
        edges = np.array([
            1.0 + 2.0 ** -11,                  # fp16 tie, rounds down to even
            1.0 + 3 * 2.0 ** -11,              # fp16 tie, rounds up to even
            65504.0, 65519.99, 65520.0, 1e9,   # top of fp16: max, still max, inf, inf
            2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26, 2.0 ** -14 - 2.0 ** -25,  # fp16 subnormals
            1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8,  # bf16 ties
            -0.0, 0.0, 1e-40, -3.4e38, np.inf, -np.inf, np.nan,
        ], dtype=np.float32)
        x[: edges.size] = edges
        return x
    n_blocks = 2 if elems == QK_K else 8
    blocks = []
    for b in range(n_blocks):
        scale = [1.0, 1e-3, 100.0, 0.02, 5.0, 1.0, 1.0, 1.0][b]
        blocks.append((rng.standard_normal(elems) * scale).astype(np.float32))
    if elems == 32:
        blocks[5] = np.zeros(elems, np.float32)           # d = 0
        blocks[6] = np.full(elems, -0.75, np.float32)     # min == max
        # Halfway cases: with amax 127 (Q8_0/Q8_1: d = 1) these sit exactly on .5
        tie = np.arange(elems, dtype=np.float32) - 15.5
        tie[0] = 127.0
        blocks[7] = tie
    else:
        # max = -127 gives iscale 1 in Q8_K, so these .5 values are exact ties
        tie = (np.arange(elems, dtype=np.float32) % 64) - 31.5
        tie[3] = -127.0
        blocks[1] = tie
    return np.concatenate(blocks)


QUANTIZABLE = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q8_1, T.Q8_K]


def quantize_cases() -> list:
    cases = []
    for t in QUANTIZABLE:
        elems, size = SIZES[t]
        x = vector_for(t, elems)
        with np.errstate(over="ignore", invalid="ignore"):
            raw = quantize(t, x)
        assert raw.size == x.size // elems * size, (t, raw.size)
        cases.append({"type": t.name, "type_id": int(t), "n": int(x.size), "reference": reference_name(t),
                      "input_f32_hex": f32_hex(x), "bytes_hex": raw.tobytes().hex()})
    return cases


def main() -> None:
    doc = {
        "generator": "tests/reference/make_quant_golden.py",
        "gguf_version": importlib.metadata.version("gguf"),
        "numpy_version": np.__version__,
        "dequantize": dequantize_cases(),
        "quantize": quantize_cases(),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
