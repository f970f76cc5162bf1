#pragma once
// The forward pass of each supported architecture: one chunk of tokens through every layer,
// leaving the final normalised hidden states (n x n_embd) in `hidden`. A set `cancel` is seen
// before every step of a layer and inside attention (between its work items), so a long prefill
// stops within one matrix product's time: the pass throws kvchat::Cancelled, leaving some layers
// with the chunk (the caller rolls the cache back).
#include "engine/error.h"
#include "engine/model/model.h"

#include <atomic>
#include <deque>

namespace kvchat {

void forward_gemma3(const Model& m, Backend& be, Cache& cache, const int32_t* tokens, const int32_t* pos,
                    int64_t n, Buffer& hidden, const std::atomic<bool>* cancel = nullptr);
void forward_llama(const Model& m, Backend& be, Cache& cache, const int32_t* tokens, const int32_t* pos,
                   int64_t n, Buffer& hidden, const std::atomic<bool>* cancel = nullptr);

inline bool forward_cancelled(const std::atomic<bool>* cancel) {
    return cancel && cancel->load(std::memory_order_relaxed);
}

inline void stop_if_cancelled(const std::atomic<bool>* cancel) {
    if (forward_cancelled(cancel)) throw Cancelled("Prefilling was cancelled");
}

// A forward pass's activation buffers, given back to the backend however the pass ends (a
// cancel, a full disk under an offloaded cache).
class PassBuffers {
public:
    explicit PassBuffers(Backend& be) : be_(be) {}
    ~PassBuffers() {
        for (Buffer& b : held_) be_.free(b);
    }
    PassBuffers(const PassBuffers&) = delete;
    PassBuffers& operator=(const PassBuffers&) = delete;
    Buffer& alloc(int64_t rows, int64_t cols) {
        held_.push_back(be_.alloc(rows, cols));
        return held_.back();
    }

private:
    Backend& be_;
    std::deque<Buffer> held_;  // a deque: references handed out stay valid as it grows
};

}  // namespace kvchat
