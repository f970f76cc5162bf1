#pragma once
// Scaled dot-product attention on the CPU over slots that carry their positions.
#include "engine/cache/cache_layer.h"

#include <cstdint>

namespace kvchat {

class ThreadPool;

// Keys and values of the slots a layer holds: slot i has kv heads at k + i*stride and
// v + i*stride (n_head_kv * head_dim floats each) and holds the token at position pos[i].
struct SlotView {
    const float* k = nullptr;
    const float* v = nullptr;
    const int32_t* pos = nullptr;
    int64_t n = 0;
    int64_t stride = 0;
};

// out[t] = softmax(scale * q[t]·K^T (soft-capped), masked by positions) V for each head, where
// q is n_q x (n_head*head_dim), already rotated. `window` is the layer's sliding window (0: none).
void attend_slots(const float* q, const int32_t* qpos, int64_t n_q, const SlotView& slots,
                  const AttentionShape& shape, int window, float* out, ThreadPool& pool);

}  // namespace kvchat
