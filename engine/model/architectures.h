#pragma once
// The forward pass of each supported architecture: one chunk of tokens through every layer,
// leaving the final normalised hidden states (n x n_embd) in `hidden`. A set `cancel` is seen
// before every step of a layer and inside attention (between its work items), so a long prefill
// stops within one matrix product's time: the pass throws kvchat::Cancelled, leaving some layers
// with the chunk (the caller rolls the cache back).
//
// Every architecture is made of the same steps (DecoderPass: the attention block and the
// feed-forward block, as llama.cpp's graph builders share build_qkv, build_attn and build_ffn);
// each architecture's file strings them together and says only what differs.
#include "engine/error.h"
#include "engine/model/model.h"

#include <atomic>
#include <deque>

namespace kvchat {

void forward_gemma3(const Model& m, Backend& be, Cache& cache, const int32_t* tokens, const int32_t* pos,
                    int64_t n, Buffer& hidden, const std::atomic<bool>* cancel = nullptr);
void forward_llama(const Model& m, Backend& be, Cache& cache, const int32_t* tokens, const int32_t* pos,
                   int64_t n, Buffer& hidden, const std::atomic<bool>* cancel = nullptr);
void forward_qwen2(const Model& m, Backend& be, Cache& cache, const int32_t* tokens, const int32_t* pos,
                   int64_t n, Buffer& hidden, const std::atomic<bool>* cancel = nullptr);
void forward_qwen3(const Model& m, Backend& be, Cache& cache, const int32_t* tokens, const int32_t* pos,
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

// What an attention block does beyond norm -> q, k, v -> attend -> output projection -> residual.
struct AttentionSteps {
    bool qkv_bias = false;   // q, k, v projections have biases (Qwen 2)
    bool qk_norm = false;    // per-head RMS norm of q and k before RoPE (Gemma 3, Qwen 3)
    bool post_norm = false;  // RMS norm of the block's output before the residual add (Gemma 3)
};

// What a feed-forward block does: norm -> act(gate) * up -> down -> [post-norm] -> residual.
struct FeedForwardSteps {
    GatedActivation activation = GatedActivation::Silu;
    bool post_norm = false;  // Gemma 3
};

// One chunk of tokens through the layers, step by step, on the hidden states x. The steps check
// for a cancel where the architectures always did: before every step of a layer.
class DecoderPass {
public:
    DecoderPass(const Model& m, Backend& be, Cache& cache, const int32_t* pos, int64_t n, Buffer& x,
                const std::atomic<bool>* cancel);
    // x = the tokens' embeddings times the model's embedding scale.
    void embed(const int32_t* tokens);
    // x += [post_norm](wo . attend(rope([qk_norm](W{q,k,v} . norm(x) [+ b{q,k,v}]))))
    void attention(int il, const AttentionSteps& s);
    // x += [post_norm](w_down . (act(w_gate . norm(x)) * (w_up . norm(x))))
    void feed_forward(int il, const FeedForwardSteps& s);
    // x = output_norm(x)
    void output_norm();

private:
    void step() const { stop_if_cancelled(cancel_); }

    const ModelConfig& c_;
    const BackendWeights& w_;  // the model's weights on be_
    Backend& be_;
    Cache& cache_;
    const int32_t* pos_;
    int64_t n_;
    Buffer& x_;
    const std::atomic<bool>* cancel_;
    PassBuffers bufs_;
    Buffer &xn_, &q_, &k_, &v_, &att_, &proj_, &gate_, &up_;
};

}  // namespace kvchat
