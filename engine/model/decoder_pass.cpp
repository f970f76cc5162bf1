// The steps every architecture's layer is made of (architectures.h). Their order of operations is
// llama.cpp's, so each architecture computes what llama.cpp's graph for it does.
#include "engine/model/architectures.h"

namespace kvchat {

DecoderPass::DecoderPass(const Model& m, Backend& be, Cache& cache, const int32_t* pos, int64_t n, Buffer& x,
                         const std::atomic<bool>* cancel)
    : c_(m.config()),
      w_(m.weights_on(be)),
      be_(be),
      cache_(cache),
      pos_(pos),
      n_(n),
      x_(x),
      cancel_(cancel),
      bufs_(be),
      xn_(bufs_.alloc(n, c_.n_embd)),
      q_(bufs_.alloc(n, int64_t(c_.n_head) * c_.head_dim)),
      k_(bufs_.alloc(n, int64_t(c_.n_head_kv) * c_.head_dim)),
      v_(bufs_.alloc(n, int64_t(c_.n_head_kv) * c_.head_dim)),
      att_(bufs_.alloc(n, int64_t(c_.n_head) * c_.head_dim)),
      proj_(bufs_.alloc(n, c_.n_embd)),
      gate_(bufs_.alloc(n, c_.n_ff)),
      up_(bufs_.alloc(n, c_.n_ff)) {}

void DecoderPass::embed(const int32_t* tokens) { be_.embed(w_.token_embedding, tokens, n_, c_.embed_scale, x_); }

// A stop is seen before every step below and inside attention: one layer's attention over a few
// thousand tokens alone takes about 100 ms.
void DecoderPass::attention(int il, const AttentionSteps& s) {
    step();
    const PlacedLayer& w = w_.layers[static_cast<size_t>(il)];
    be_.rms_norm(x_, n_, w.attn_norm, c_.rms_eps, xn_);
    const MatmulOutput qkv[3] = {{&w.wq, &q_}, {&w.wk, &k_}, {&w.wv, &v_}};
    be_.matmuls(xn_, n_, qkv, 3);
    if (s.qkv_bias) {
        be_.add_bias(q_, n_, w.bq);
        be_.add_bias(k_, n_, w.bk);
        be_.add_bias(v_, n_, w.bv);
    }
    if (s.qk_norm) {
        be_.rms_norm(q_, n_, w.q_norm, c_.rms_eps, q_);  // per head: the norm has head_dim weights
        be_.rms_norm(k_, n_, w.k_norm, c_.rms_eps, k_);
    }
    step();
    cache_.layer(il).attend(q_, k_, v_, pos_, n_, att_, cancel_);  // RoPE, the cache's append, attention
    step();
    be_.matmul(w.wo, att_, n_, proj_);
    if (s.post_norm) be_.rms_norm(proj_, n_, w.post_attn_norm, c_.rms_eps, proj_);
    be_.add(x_, proj_, n_);
}

void DecoderPass::feed_forward(int il, const FeedForwardSteps& s) {
    step();
    const PlacedLayer& w = w_.layers[static_cast<size_t>(il)];
    be_.rms_norm(x_, n_, w.ffn_norm, c_.rms_eps, xn_);
    const MatmulOutput gate_up[2] = {{&w.w_gate, &gate_}, {&w.w_up, &up_}};
    be_.matmuls(xn_, n_, gate_up, 2);
    be_.gated(s.activation, gate_, up_, n_);
    step();
    be_.matmul(w.w_down, gate_, n_, proj_);
    if (s.post_norm) be_.rms_norm(proj_, n_, w.post_ffn_norm, c_.rms_eps, proj_);
    be_.add(x_, proj_, n_);
}

void DecoderPass::output_norm() { be_.rms_norm(x_, n_, w_.output_norm, c_.rms_eps, x_); }

}  // namespace kvchat
