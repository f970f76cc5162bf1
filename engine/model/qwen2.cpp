// Qwen 2 (and 2.5): Llama's layer with biases on the q, k and v projections, and RoPE on halves
// of each head (NEOX style, in the layers' RopeSpec).
#include "engine/model/architectures.h"

namespace kvchat {

void forward_qwen2(const Model& m, Backend& be, Cache& cache, const int32_t* tokens, const int32_t* pos,
                   int64_t n, Buffer& x, const std::atomic<bool>* cancel) {
    DecoderPass pass(m, be, cache, pos, n, x, cancel);
    pass.embed(tokens);
    for (int il = 0; il < m.config().n_layer; ++il) {
        pass.attention(il, {.qkv_bias = true});
        pass.feed_forward(il, {.activation = GatedActivation::Silu});
    }
    pass.output_norm();
}

}  // namespace kvchat
