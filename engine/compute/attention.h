#pragma once
// Scaled dot-product attention on the CPU over what a cache layer holds: runs of full-precision
// slots (f16, bf16 or f32, read as stored) that carry their positions, and KIVI blocks read in place (keys and values computed from their
// codes inside the loops, never materialised). Each query's softmax is exact over all of it
// (max, then exp and sum, then normalize), as llama.cpp's non-flash path.
#include "engine/compute/kivi_block.h"
#include "engine/compute/kv_dtype.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

namespace kvchat {

class ThreadPool;

struct AttentionShape {
    int n_head = 0;
    int n_head_kv = 0;
    int head_dim = 0;
    float scale = 1.0f;    // applied to q·k
    float softcap = 0.0f;  // attention logit soft-capping; 0 = none
    // Round as llama.cpp's default (non-flash) attention does over its f16 KV cache: scaled
    // queries, keys (after RoPE), values and the softmax probabilities on the fp16 grid.
    bool f16_rounding = false;
};


// Keys and values of full-precision slots in AttentionInput::dtype: slot i has kv heads at
// k + i*stride and v + i*stride (n_head_kv * head_dim values each; stride counts values, not
// bytes) and holds the token at position pos[i] (INT32_MAX: empty).
struct SlotView {
    const void* k = nullptr;
    const void* v = nullptr;
    const int32_t* pos = nullptr;
    int64_t n = 0;
    int64_t stride = 0;
};

// `count` consecutive tokens from position first_pos, quantized in one block record.
struct QuantBlockView {
    const uint8_t* data = nullptr;
    int32_t first_pos = 0;
    int32_t count = 0;
};

struct AttentionInput {
    const float* q = nullptr;       // n_q x (n_head*head_dim), rotated at the query positions
    const float* q_sink = nullptr;  // the same queries rotated at their rank in a sink cache (or null)
    const int32_t* qpos = nullptr;
    int64_t n_q = 0;
    // A query at p sees a slot at q <= p when q < sink_end, or window == 0, or p - q < window.
    int window = 0;
    int sink_end = 0;
    std::vector<SlotView> slots;
    KvDtype dtype = KvDtype::F32;  // of every slot view
    const KiviFormat* kivi = nullptr;
    std::vector<QuantBlockView> blocks;
    // llama.cpp's non-flash attention: the softmax is finished over all visible slots, and the
    // normalized probabilities are rounded to fp16 before they weight the values (its P·V is an
    // f16 matmul). The caller rounds q (already scaled: shape.scale must be 1), k and v. Only for
    // full-precision slots (no blocks). Where reference_order_applies, in llama.cpp's summation order too.
    bool f16_probs = false;
    // Set from another thread: the work items not yet started are skipped, and `out` is left
    // incomplete (the caller throws kvchat::Cancelled). A backend may also finish the call.
    const std::atomic<bool>* cancel = nullptr;
    bool cancelled() const { return cancel && cancel->load(std::memory_order_relaxed); }
};

// How a prefill's queries are cut into work items for the threads, shared by both kernels:
// tiles of up to tile_rows rows (query heads x queries), in a number of tiles that shares evenly
// among the threads (17 queries on 2 threads: 9 + 8, not 16 + 1), all of about the same size.
// Item i of items() is kv head i % n_kv and a tile taken first/last alternately, so a contiguous
// share of items mixes short and long causal rows.
struct QueryTiles {
    QueryTiles(int64_t n_q, int group, int n_kv, int threads, int tile_rows);
    int64_t items() const { return n_tiles * n_kv; }
    struct Item {
        int g;           // kv head
        int64_t t0, t1;  // queries [t0, t1)
    };
    Item item(int64_t i) const {
        const int64_t k = i / n_kv;
        const int64_t tile = k % 2 == 0 ? k / 2 : n_tiles - 1 - k / 2;
        return {static_cast<int>(i % n_kv), tile * tq, std::min(n_q, tile * tq + tq)};
    }
    int64_t n_q, n_kv, tq, n_tiles;
};

// out: n_q x (n_head*head_dim).
void attend(const AttentionInput& in, const AttentionShape& shape, float* out, ThreadPool& pool);

// For attend(): f16_probs inputs of f16 slots, or f32 slots holding f16 values (no sinks, no quantized blocks, no softcap, q
// pre-scaled) are llama.cpp's non-flash attention over its f16 cache, and attend_reference_order
// (attention_reference_order.cpp) computes them in its order, bit for bit: a call of one query as its
// decode step (ggml_vec_dot_f16), of several as its batch (tinyBLAS). Slot positions stand for
// llama.cpp's cells (one sequence filled in order).
bool reference_order_applies(const AttentionInput& in, const AttentionShape& shape);
void attend_reference_order(const AttentionInput& in, const AttentionShape& shape, float* out, ThreadPool& pool);

}  // namespace kvchat
