// Gemma 3 (text): embeddings scaled by sqrt(n_embd) (ModelConfig::embed_scale), sandwich norms
// around attention and the feed-forward, RMS-normed queries and keys, GeGLU with tanh GELU, five
// sliding layers per global one (the cache's layer specs).
#include "engine/model/architectures.h"

namespace kvchat {

void forward_gemma3(const Model& m, Backend& be, Cache& cache, const int32_t* tokens, const int32_t* pos,
                    int64_t n, Buffer& x, const std::atomic<bool>* cancel) {
    DecoderPass pass(m, be, cache, pos, n, x, cancel);
    pass.embed(tokens);
    for (int il = 0; il < m.config().n_layer; ++il) {
        pass.attention(il, {.qk_norm = true, .post_norm = true});
        pass.feed_forward(il, {.activation = GatedActivation::GeluTanh, .post_norm = true});
    }
    pass.output_norm();
}

}  // namespace kvchat
