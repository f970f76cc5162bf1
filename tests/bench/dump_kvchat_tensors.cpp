// Dumps kvchat's intermediate values of the default model (Gemma 3) under llama.cpp's graph names,
// one raw float32 file per tensor (OUT_DIR/NAME.f32), for tests/reference/compare_tensors.py to
// set against tests/reference/dump_llama_cpp_tensors.py's. A diagnostic, not a test.
//
//   dump_kvchat_tensors OUT_DIR 2,818,5279,529,7001,563 [PREFILL]
//
// PREFILL=N runs the first N tokens as one chunk and the rest one at a time (as greedy generation
// does); the values kept are those of the last step. The pass below is forward_gemma3 step by step.
#include "engine/compute/backend.h"
#include "engine/model/model.h"
#include "engine/model/model_path.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

using namespace kvchat;

namespace {

std::string g_dir;

void dump(Backend& be, const std::string& name, const Buffer& b, int64_t rows) {
    std::vector<float> host(static_cast<size_t>(rows * b.cols));
    be.read(b, rows, host.data());
    const std::string path = g_dir + "/" + name + ".f32";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) {
        std::perror(path.c_str());
        std::exit(1);
    }
    std::fwrite(host.data(), sizeof(float), host.size(), f);
    std::fclose(f);
}

void dumping_forward(const Model& m, Backend& be, Cache& cache, const std::vector<int32_t>& tokens) {
    const ModelConfig& c = m.config();
    const int64_t n = static_cast<int64_t>(tokens.size());
    std::vector<int32_t> pos(tokens.size());
    for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(cache.seq_length() + i);
    const int q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim;
    Buffer x = be.alloc(n, c.n_embd);
    Buffer xn = be.alloc(n, c.n_embd), q = be.alloc(n, q_dim), k = be.alloc(n, kv_dim), v = be.alloc(n, kv_dim);
    Buffer att = be.alloc(n, q_dim), proj = be.alloc(n, c.n_embd);
    Buffer gate = be.alloc(n, c.n_ff), up = be.alloc(n, c.n_ff);
    const BackendWeights& placed = m.weights_on(be);
    be.embed(placed.token_embedding, tokens.data(), n, c.embed_scale, x);
    dump(be, "inp_scaled", x, n);
    for (int il = 0; il < c.n_layer; ++il) {
        const std::string L = "-" + std::to_string(il);
        const PlacedLayer& w = placed.layers[static_cast<size_t>(il)];
        be.rms_norm(x, n, w.attn_norm, c.rms_eps, xn);
        dump(be, "attn_norm" + L, xn, n);
        be.matmul(w.wq, xn, n, q);
        be.matmul(w.wk, xn, n, k);
        be.matmul(w.wv, xn, n, v);
        dump(be, "Qcur" + L, q, n);  // llama.cpp's first Qcur, before its norm and RoPE
        dump(be, "Kcur" + L, k, n);
        dump(be, "Vcur" + L, v, n);
        be.rms_norm(q, n, w.q_norm, c.rms_eps, q);
        be.rms_norm(k, n, w.k_norm, c.rms_eps, k);
        dump(be, "Qcur_normed" + L, q, n);
        dump(be, "Kcur_normed" + L, k, n);
        cache.layer(il).attend(q, k, v, pos.data(), n, att);
        dump(be, "kqv_out" + L, att, n);
        be.matmul(w.wo, att, n, proj);
        dump(be, "attn_out" + L, proj, n);
        be.rms_norm(proj, n, w.post_attn_norm, c.rms_eps, proj);
        dump(be, "attn_post_norm" + L, proj, n);
        be.add(x, proj, n);
        dump(be, "sa_out" + L, x, n);
        be.rms_norm(x, n, w.ffn_norm, c.rms_eps, xn);
        dump(be, "ffn_norm" + L, xn, n);
        be.matmul(w.w_gate, xn, n, gate);
        be.matmul(w.w_up, xn, n, up);
        dump(be, "ffn_gate" + L, gate, n);
        dump(be, "ffn_up" + L, up, n);
        be.gated(GatedActivation::GeluTanh, gate, up, n);
        dump(be, "ffn_geglu" + L, gate, n);
        be.matmul(w.w_down, gate, n, proj);
        dump(be, "ffn_out" + L, proj, n);
        be.rms_norm(proj, n, w.post_ffn_norm, c.rms_eps, proj);
        dump(be, "ffn_post_norm" + L, proj, n);
        be.add(x, proj, n);
        dump(be, "l_out" + L, x, n);
    }
    cache.append_tokens(tokens.data(), n);
    be.rms_norm(x, n, placed.output_norm, c.rms_eps, x);
    dump(be, "result_norm", x, n);
    Buffer lg = be.alloc(n, c.n_vocab);
    be.matmul(placed.output, x, n, lg);
    dump(be, "result_output", lg, n);
    for (Buffer* b : {&x, &xn, &q, &k, &v, &att, &proj, &gate, &up, &lg}) be.free(*b);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s OUT_DIR TOKEN,TOKEN,... [PREFILL]\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];
    std::vector<int32_t> tokens;
    std::stringstream ss(argv[2]);
    for (std::string t; std::getline(ss, t, ',');) tokens.push_back(static_cast<int32_t>(std::stol(t)));
    const int64_t prefill = argc > 3 ? std::stol(argv[3]) : 0;
    auto model = Model::load(resolve_model_path(""));
    auto backend = make_cpu_backend(2);
    auto cache = model->make_default_cache(*backend);
    std::vector<float> logits;
    std::vector<int32_t> last(tokens);
    if (prefill > 0) {
        model->forward(*backend, *cache, tokens.data(), prefill, Logits::None, logits);
        for (size_t i = static_cast<size_t>(prefill); i + 1 < tokens.size(); ++i)
            model->forward(*backend, *cache, &tokens[i], 1, Logits::None, logits);
        last.assign(tokens.end() - 1, tokens.end());
    }
    dumping_forward(*model, *backend, *cache, last);
    std::printf("%zu tokens -> %s\n", last.size(), g_dir.c_str());
    return 0;
}
