// Llama family (Llama 2, TinyLlama, Mistral): pre-norm blocks, grouped-query attention with
// RoPE, SwiGLU feed-forward.
#include "engine/model/architectures.h"

namespace kvchat {

void forward_llama(const Model& m, Backend& be, Cache& cache, const int32_t* tokens, const int32_t* pos,
                   int64_t n, Buffer& x, const std::atomic<bool>* cancel) {
    const ModelConfig& c = m.config();
    const int q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim;
    Buffer xn = be.alloc(n, c.n_embd), q = be.alloc(n, q_dim), k = be.alloc(n, kv_dim), v = be.alloc(n, kv_dim);
    Buffer att = be.alloc(n, q_dim), proj = be.alloc(n, c.n_embd);
    Buffer gate = be.alloc(n, c.n_ff), up = be.alloc(n, c.n_ff);

    be.embed(m.token_embedding(), tokens, n, c.embed_scale, x);
    // Seen before each layer's attention and its feed-forward: a stop waits at most half a layer.
    const auto stop_if_cancelled = [&] {
        if (!forward_cancelled(cancel)) return;
        for (Buffer* b : {&xn, &q, &k, &v, &att, &proj, &gate, &up}) be.free(*b);
        throw Cancelled("Prefilling was cancelled");
    };
    for (int il = 0; il < c.n_layer; ++il) {
        stop_if_cancelled();
        const LayerWeights& w = m.layer(il);
        // attention
        be.rms_norm(x, n, w.attn_norm, c.rms_eps, xn);
        be.matmul(w.wq, xn, n, q);
        be.matmul(w.wk, xn, n, k);
        be.matmul(w.wv, xn, n, v);
        cache.layer(il).attend(q, k, v, pos, n, att);
        be.matmul(w.wo, att, n, proj);
        be.add(x, proj, n);
        // feed-forward
        stop_if_cancelled();
        be.rms_norm(x, n, w.ffn_norm, c.rms_eps, xn);
        be.matmul(w.w_gate, xn, n, gate);
        be.matmul(w.w_up, xn, n, up);
        be.gated(GatedActivation::Silu, gate, up, n);
        be.matmul(w.w_down, gate, n, proj);
        be.add(x, proj, n);
    }
    be.rms_norm(x, n, m.output_norm(), c.rms_eps, x);

    for (Buffer* b : {&xn, &q, &k, &v, &att, &proj, &gate, &up}) be.free(*b);
}

}  // namespace kvchat
