#pragma once
// The forward pass of each supported architecture: one chunk of tokens through every layer,
// leaving the final normalised hidden states (n x n_embd) in `hidden`. A set `cancel` is seen
// between layers (a long prefill stops within one layer's time): the pass throws
// kvchat::Cancelled, leaving some layers with the chunk (the caller rolls the cache back).
#include "engine/error.h"
#include "engine/model/model.h"

#include <atomic>

namespace kvchat {

void forward_gemma3(const Model& m, Backend& be, Cache& cache, const int32_t* tokens, const int32_t* pos,
                    int64_t n, Buffer& hidden, const std::atomic<bool>* cancel = nullptr);
void forward_llama(const Model& m, Backend& be, Cache& cache, const int32_t* tokens, const int32_t* pos,
                   int64_t n, Buffer& hidden, const std::atomic<bool>* cancel = nullptr);

inline bool forward_cancelled(const std::atomic<bool>* cancel) {
    return cancel && cancel->load(std::memory_order_relaxed);
}

}  // namespace kvchat
