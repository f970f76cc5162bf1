"""A smaller copy of a llama-family GGUF for machines that take few bytes: the first N blocks and
every other tensor, the token embeddings re-quantized to Q4_1, the metadata as it was except the
block count. The copy's text is not the model's, but the CPU and the GPU compute the same file, which
is what test_cuda_backend compares.

    truncate_gguf.py SOURCE.gguf DEST.gguf N
"""
import sys, numpy as np, gguf
from gguf import GGUFReader, GGUFWriter, GGUFValueType as T
src, dst, keep = sys.argv[1], sys.argv[2], int(sys.argv[3])
r = GGUFReader(src)
arch = r.fields['general.architecture'].contents()
w = GGUFWriter(dst, arch)
for name, f in r.fields.items():
    if name.startswith('GGUF.') or name == 'general.architecture': continue
    v = f.contents()
    if name == f'{arch}.block_count': v = keep
    t = f.types[0]
    if t == T.ARRAY:
        w.add_key_value(name, v, T.ARRAY, sub_type=f.types[1])
    else:
        w.add_key_value(name, v, t)
for t in r.tensors:
    if t.name.startswith('blk.') and int(t.name.split('.')[1]) >= keep: continue
    data = np.array(t.data)
    shape = [int(x) for x in reversed(t.shape)]  # numpy order
    if t.name == 'token_embd.weight':
        f = gguf.quants.dequantize(data, t.tensor_type)
        qd = gguf.quants.quantize(f, gguf.GGMLQuantizationType.Q4_1)
        w.add_tensor(t.name, qd, raw_dtype=gguf.GGMLQuantizationType.Q4_1)
    else:
        w.add_tensor(t.name, data, raw_dtype=t.tensor_type)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
