// Gemma 3 (text): scaled embeddings, sandwich norms around attention and the feed-forward,
// RMS-normed queries and keys, GeGLU with tanh GELU, five sliding layers per global one.
#include "engine/model/architectures.h"

namespace kvchat {

void forward_gemma3(const Model& m, Backend& be, Cache& cache, const int32_t* tokens, const int32_t* pos,
                    int64_t n, Buffer& x, const std::atomic<bool>* cancel) {
    const ModelConfig& c = m.config();
    const int q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim;
    PassBuffers bufs(be);
    Buffer &xn = bufs.alloc(n, c.n_embd), &q = bufs.alloc(n, q_dim), &k = bufs.alloc(n, kv_dim), &v = bufs.alloc(n, kv_dim);
    Buffer &att = bufs.alloc(n, q_dim), &proj = bufs.alloc(n, c.n_embd);
    Buffer &gate = bufs.alloc(n, c.n_ff), &up = bufs.alloc(n, c.n_ff);

    be.embed(m.token_embedding(), tokens, n, c.embed_scale, x);
    // A stop is seen before every step below and inside attention: one layer's attention over a
    // few thousand tokens alone takes about 100 ms.
    const auto step = [&] { stop_if_cancelled(cancel); };
    for (int il = 0; il < c.n_layer; ++il) {
        step();
        const LayerWeights& w = m.layer(il);
        // attention
        be.rms_norm(x, n, w.attn_norm, c.rms_eps, xn);
        be.matmul(w.wq, xn, n, q);
        step();
        be.matmul(w.wk, xn, n, k);
        be.matmul(w.wv, xn, n, v);
        be.rms_norm(q, n, w.q_norm, c.rms_eps, q);  // per head: the norm has head_dim weights
        be.rms_norm(k, n, w.k_norm, c.rms_eps, k);
        step();
        cache.layer(il).attend(q, k, v, pos, n, att, cancel);
        step();
        be.matmul(w.wo, att, n, proj);
        be.rms_norm(proj, n, w.post_attn_norm, c.rms_eps, proj);
        be.add(x, proj, n);
        // feed-forward
        step();
        be.rms_norm(x, n, w.ffn_norm, c.rms_eps, xn);
        be.matmul(w.w_gate, xn, n, gate);
        step();
        be.matmul(w.w_up, xn, n, up);
        be.gated(GatedActivation::GeluTanh, gate, up, n);
        step();
        be.matmul(w.w_down, gate, n, proj);
        be.rms_norm(proj, n, w.post_ffn_norm, c.rms_eps, proj);
        be.add(x, proj, n);
    }
    be.rms_norm(x, n, m.output_norm(), c.rms_eps, x);
}

}  // namespace kvchat
