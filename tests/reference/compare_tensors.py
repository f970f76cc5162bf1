#!/usr/bin/env python3
"""Sets kvchat's intermediate values (tests/bench/dump_kvchat_tensors.cpp) against llama.cpp's
(tests/reference/dump_llama_cpp_tensors.py), name by name in graph order: how many values differ
at all (bit for bit) and by how much. A diagnostic for finding the first operation whose
arithmetic leaves llama.cpp's.

    compare_tensors.py LLAMA.npz KVCHAT_DIR [NAME_FILTER]
"""
import os
import sys

import numpy as np


def main():
    ref = np.load(sys.argv[1])
    ours_dir = sys.argv[2]
    filt = sys.argv[3] if len(sys.argv) > 3 else ""
    for name in ref.files:
        if name.endswith("__ne") or filt not in name:
            continue
        path = os.path.join(ours_dir, name + ".f32")
        if not os.path.exists(path):
            continue
        a = ref[name].astype(np.float32)
        b = np.fromfile(path, dtype=np.float32)
        if a.size != b.size:
            print(f"{name:24s} size {a.size} vs {b.size}")
            continue
        diff = np.abs(a - b)
        same = np.sum(a.view(np.uint32) == b.view(np.uint32))
        scale = max(float(np.max(np.abs(a))), 1e-30)
        print(f"{name:24s} {a.size - same:8d} of {a.size:8d} differ, max |diff| {diff.max():.3e} "
              f"(rel. to max {diff.max() / scale:.2e})")


if __name__ == "__main__":
    main()
