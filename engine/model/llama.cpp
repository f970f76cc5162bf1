// Llama family (Llama 2 and 3, TinyLlama, Mistral, SmolLM): pre-norm blocks, grouped-query
// attention with RoPE (Llama 3: with per-pair frequency factors, in the layers' RopeSpec), SwiGLU
// feed-forward. Phi-3 runs this pass too: its fused weights (attn_qkv holding q, k and v; ffn_up
// holding gate then up) are row ranges of one tensor each, which the loader hands out as the
// separate matrices (a row's dot product does not depend on its neighbours, so the parts give the
// fused product's numbers).
#include "engine/model/architectures.h"

namespace kvchat {

void forward_llama(const Model& m, Backend& be, Cache& cache, const int32_t* tokens, const int32_t* pos,
                   int64_t n, Buffer& x, const std::atomic<bool>* cancel) {
    DecoderPass pass(m, be, cache, pos, n, x, cancel);
    pass.embed(tokens);
    for (int il = 0; il < m.config().n_layer; ++il) {
        pass.attention(il, {});
        pass.feed_forward(il, {.activation = GatedActivation::Silu});
    }
    pass.output_norm();
}

}  // namespace kvchat
