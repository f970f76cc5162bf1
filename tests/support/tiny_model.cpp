#include "support/tiny_model.h"

#include "support/gguf_writer.h"
#include "support/safetensors_writer.h"

#include "engine/compute/quant_blocks.h"

#include <fstream>
#include <sstream>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

namespace kvchat::test {

double relative_error(const std::vector<float>& got, const std::vector<std::vector<double>>& want, int64_t n_vocab) {
    double worst = 0.0, spread = 0.0;
    for (size_t t = 0; t < want.size(); ++t)
        for (int64_t i = 0; i < n_vocab; ++i) {
            spread = std::max(spread, std::fabs(want[t][static_cast<size_t>(i)]));
            worst = std::max(worst, std::fabs(got[t * n_vocab + i] - want[t][static_cast<size_t>(i)]));
        }
    return worst / spread;
}

bool tiny_layer_sliding(const TinyModelSpec& s, int il) {
    if (s.sliding_window <= 0) return false;
    return s.arch == "gemma3" ? il % 6 < 5 : true;
}

namespace {

// Random weights quantized to `type`, and the same weights read back as the file stores them.
struct Matrix {
    std::string bytes;
    std::vector<double> values;
};

Matrix random_matrix(std::mt19937& rng, TensorType type, int64_t rows, int64_t cols, double scale) {
    std::normal_distribution<float> dist(0.0f, static_cast<float>(scale));
    std::vector<float> w(static_cast<size_t>(rows * cols));
    for (float& x : w) x = dist(rng);
    Matrix m;
    const size_t rb = row_bytes(type, cols);
    m.bytes.resize(rb * static_cast<size_t>(rows));
    m.values.resize(w.size());
    std::vector<float> back(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        quantize_row(type, w.data() + r * cols, m.bytes.data() + r * rb, cols);
        dequantize_row(type, m.bytes.data() + r * rb, back.data(), cols);
        for (int64_t c = 0; c < cols; ++c) m.values[static_cast<size_t>(r * cols + c)] = back[static_cast<size_t>(c)];
    }
    return m;
}

std::vector<double> random_norm(std::mt19937& rng, int64_t n) {
    std::uniform_real_distribution<float> dist(0.5f, 1.5f);
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = static_cast<float>(dist(rng));
    return v;
}

std::string f32_bytes(const std::vector<double>& v) {
    std::string s(v.size() * 4, '\0');
    for (size_t i = 0; i < v.size(); ++i) {
        const float f = static_cast<float>(v[i]);
        std::memcpy(s.data() + 4 * i, &f, 4);
    }
    return s;
}

// A SentencePiece vocabulary: <pad> <eos> <bos> <unk>, Gemma's turn markers, the 256 byte
// pieces, then whole words, padded to n_vocab with unused pieces.
void add_vocab(GgufWriter& w, const TinyModelSpec& s) {
    std::vector<std::string> tokens = {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"};
    std::vector<int32_t> types = {3, 3, 3, 2, 3, 3};
    for (int b = 0; b < 256; ++b) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        tokens.push_back(buf);
        types.push_back(6);
    }
    for (const char* word : {"\xe2\x96\x81" "the", "\xe2\x96\x81" "a", "\xe2\x96\x81" "cat", "\xe2\x96\x81" "sat", "\xe2\x96\x81" "on",
                             "\xe2\x96\x81" "mat", "\xe2\x96\x81", "the", "a", "e", "t", "h"}) {
        tokens.push_back(word);
        types.push_back(1);
    }
    while (static_cast<int>(tokens.size()) < s.n_vocab) {
        tokens.push_back("<unused" + std::to_string(tokens.size()) + ">");
        types.push_back(5);
    }
    std::vector<float> scores(tokens.size(), 0.0f);
    for (size_t i = 0; i < tokens.size(); ++i) scores[i] = types[i] == 1 ? -static_cast<float>(i) : 0.0f;
    w.add_string("tokenizer.ggml.model", "llama");
    w.add_string_array("tokenizer.ggml.tokens", tokens);
    w.add_float32_array("tokenizer.ggml.scores", scores);
    w.add_int32_array("tokenizer.ggml.token_type", types);
    w.add_uint32("tokenizer.ggml.bos_token_id", 2);
    w.add_uint32("tokenizer.ggml.eos_token_id", 1);
    w.add_uint32("tokenizer.ggml.unknown_token_id", 3);
    w.add_uint32("tokenizer.ggml.padding_token_id", 0);
    w.add_bool("tokenizer.ggml.add_bos_token", true);
    w.add_bool("tokenizer.ggml.add_space_prefix", s.arch != "gemma3");
    if (!s.chat_template.empty()) w.add_string("tokenizer.chat_template", s.chat_template);
}

}  // namespace

ReferenceModel write_tiny_gguf(const TinyModelSpec& s, const std::string& path) {
    std::mt19937 rng(s.seed);
    ReferenceModel m;
    m.spec = s;
    const bool gemma = s.arch == "gemma3";
    m.half_split_rope = gemma;
    m.f16_attention = true;
    m.embed_scale = gemma ? std::sqrt(static_cast<float>(s.n_embd)) : 1.0;

    GgufWriter w(3, 32);
    const std::string a = s.arch + ".";
    w.add_string("general.architecture", s.arch);
    w.add_string("general.name", "tiny " + s.arch);
    w.add_uint32(a + "block_count", static_cast<uint32_t>(s.n_layer));
    w.add_uint32(a + "embedding_length", static_cast<uint32_t>(s.n_embd));
    w.add_uint32(a + "feed_forward_length", static_cast<uint32_t>(s.n_ff));
    w.add_uint32(a + "attention.head_count", static_cast<uint32_t>(s.n_head));
    w.add_uint32(a + "attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
    w.add_uint32(a + "attention.key_length", static_cast<uint32_t>(s.head_dim));
    w.add_uint32(a + "attention.value_length", static_cast<uint32_t>(s.head_dim));
    w.add_uint32(a + "context_length", static_cast<uint32_t>(s.n_ctx));
    w.add_float32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
    w.add_float32(a + "rope.freq_base", static_cast<float>(s.rope_base));
    if (s.sliding_window > 0) w.add_uint32(a + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
    add_vocab(w, s);

    auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, std::vector<double>& out) {
        Matrix mx = random_matrix(rng, s.weight_type, rows, cols, 1.0 / std::sqrt(static_cast<double>(cols)));
        w.add_tensor({name, static_cast<uint32_t>(s.weight_type), {cols, rows}, std::move(mx.bytes), std::nullopt});
        out = std::move(mx.values);
    };
    auto norm = [&](const std::string& name, int64_t n, std::vector<double>& out) {
        out = random_norm(rng, n);
        w.add_tensor({name, 0, {n}, f32_bytes(out), std::nullopt});
    };
    {
        // Embeddings of unit scale, as real models have.
        Matrix e = random_matrix(rng, s.weight_type, s.n_vocab, s.n_embd, gemma ? 0.1 : 1.0);
        w.add_tensor({"token_embd.weight", static_cast<uint32_t>(s.weight_type), {s.n_embd, s.n_vocab},
                      std::move(e.bytes), std::nullopt});
        m.tok_embd = std::move(e.values);
    }
    norm("output_norm.weight", s.n_embd, m.output_norm);
    const int64_t q_dim = static_cast<int64_t>(s.n_head) * s.head_dim;
    const int64_t kv_dim = static_cast<int64_t>(s.n_head_kv) * s.head_dim;
    m.layers.resize(static_cast<size_t>(s.n_layer));
    for (int il = 0; il < s.n_layer; ++il) {
        ReferenceModel::Layer& L = m.layers[static_cast<size_t>(il)];
        const std::string p = "blk." + std::to_string(il) + ".";
        norm(p + "attn_norm.weight", s.n_embd, L.attn_norm);
        matrix(p + "attn_q.weight", q_dim, s.n_embd, L.wq);
        matrix(p + "attn_k.weight", kv_dim, s.n_embd, L.wk);
        matrix(p + "attn_v.weight", kv_dim, s.n_embd, L.wv);
        matrix(p + "attn_output.weight", s.n_embd, q_dim, L.wo);
        norm(p + "ffn_norm.weight", s.n_embd, L.ffn_norm);
        matrix(p + "ffn_gate.weight", s.n_ff, s.n_embd, L.w_gate);
        matrix(p + "ffn_up.weight", s.n_ff, s.n_embd, L.w_up);
        matrix(p + "ffn_down.weight", s.n_embd, s.n_ff, L.w_down);
        if (gemma) {
            norm(p + "attn_q_norm.weight", s.head_dim, L.q_norm);
            norm(p + "attn_k_norm.weight", s.head_dim, L.k_norm);
            norm(p + "post_attention_norm.weight", s.n_embd, L.post_attn_norm);
            norm(p + "post_ffw_norm.weight", s.n_embd, L.post_ffn_norm);
        }
    }
    if (s.edit_gguf) s.edit_gguf(w);
    w.write(path);
    return m;
}

namespace {

// Random weights stored as dtype; `values` gets them as stored.
std::string random_hf_tensor(std::mt19937& rng, const std::string& dtype, size_t n, double scale, double offset,
                             std::vector<double>& values) {
    std::normal_distribution<float> dist(0.0f, static_cast<float>(scale));
    std::string bytes;
    values.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const float f = static_cast<float>(offset) + dist(rng);
        if (dtype == "F16") {
            const uint16_t h = fp32_to_fp16(f);
            bytes.append(reinterpret_cast<const char*>(&h), 2);
            values[i] = fp16_to_fp32(h);
        } else if (dtype == "BF16") {
            const uint16_t h = fp32_to_bf16(f);
            bytes.append(reinterpret_cast<const char*>(&h), 2);
            values[i] = bf16_to_fp32(h);
        } else {
            bytes.append(reinterpret_cast<const char*>(&f), 4);
            values[i] = f;
        }
    }
    return bytes;
}

}  // namespace

ReferenceModel write_tiny_hf(const TinyModelSpec& s, const std::string& dir, const std::string& dtype,
                             const std::string& tokenizer_path, int shards) {
    std::mt19937 rng(s.seed);
    ReferenceModel m;
    m.spec = s;
    const bool gemma = s.arch == "gemma3";
    m.half_split_rope = true;
    m.embed_scale = gemma ? std::sqrt(static_cast<float>(s.n_embd)) : 1.0;
    std::vector<SafetensorsTensorSpec> tensors;
    const int64_t q_dim = static_cast<int64_t>(s.n_head) * s.head_dim;
    const int64_t kv_dim = static_cast<int64_t>(s.n_head_kv) * s.head_dim;
    auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, std::vector<double>& out, double scale) {
        tensors.push_back({name, dtype, {rows, cols},
                           random_hf_tensor(rng, dtype, static_cast<size_t>(rows * cols), scale, 0.0, out)});
    };
    // Gemma stores w and multiplies by 1 + w; Llama stores the multiplier itself.
    auto norm = [&](const std::string& name, int64_t n, std::vector<double>& out) {
        tensors.push_back({name, dtype, {n}, random_hf_tensor(rng, dtype, static_cast<size_t>(n), 0.25, gemma ? 0.0 : 1.0, out)});
        if (gemma)
            for (double& v : out) v += 1.0;
    };
    const std::string p0 = "model.";
    matrix(p0 + "embed_tokens.weight", s.n_vocab, s.n_embd, m.tok_embd, gemma ? 0.1 : 1.0);
    norm(p0 + "norm.weight", s.n_embd, m.output_norm);
    m.layers.resize(static_cast<size_t>(s.n_layer));
    for (int il = 0; il < s.n_layer; ++il) {
        ReferenceModel::Layer& L = m.layers[static_cast<size_t>(il)];
        const std::string p = p0 + "layers." + std::to_string(il) + ".";
        const double sc = 1.0 / std::sqrt(static_cast<double>(s.n_embd));
        norm(p + "input_layernorm.weight", s.n_embd, L.attn_norm);
        matrix(p + "self_attn.q_proj.weight", q_dim, s.n_embd, L.wq, sc);
        matrix(p + "self_attn.k_proj.weight", kv_dim, s.n_embd, L.wk, sc);
        matrix(p + "self_attn.v_proj.weight", kv_dim, s.n_embd, L.wv, sc);
        matrix(p + "self_attn.o_proj.weight", s.n_embd, q_dim, L.wo, 1.0 / std::sqrt(static_cast<double>(q_dim)));
        matrix(p + "mlp.gate_proj.weight", s.n_ff, s.n_embd, L.w_gate, sc);
        matrix(p + "mlp.up_proj.weight", s.n_ff, s.n_embd, L.w_up, sc);
        matrix(p + "mlp.down_proj.weight", s.n_embd, s.n_ff, L.w_down, 1.0 / std::sqrt(static_cast<double>(s.n_ff)));
        if (gemma) {
            norm(p + "self_attn.q_norm.weight", s.head_dim, L.q_norm);
            norm(p + "self_attn.k_norm.weight", s.head_dim, L.k_norm);
            norm(p + "post_attention_layernorm.weight", s.n_embd, L.post_attn_norm);
            norm(p + "pre_feedforward_layernorm.weight", s.n_embd, L.ffn_norm);
            norm(p + "post_feedforward_layernorm.weight", s.n_embd, L.post_ffn_norm);
        } else {
            norm(p + "post_attention_layernorm.weight", s.n_embd, L.ffn_norm);
        }
    }
    std::ostringstream cfg;
    cfg << "{\"model_type\": \"" << (gemma ? "gemma3_text" : "llama") << "\", \"hidden_size\": " << s.n_embd
        << ", \"intermediate_size\": " << s.n_ff << ", \"num_hidden_layers\": " << s.n_layer
        << ", \"num_attention_heads\": " << s.n_head << ", \"num_key_value_heads\": " << s.n_head_kv
        << ", \"head_dim\": " << s.head_dim << ", \"rms_norm_eps\": 1e-06, \"rope_theta\": " << s.rope_base
        << ", \"max_position_embeddings\": 2048, \"vocab_size\": " << s.n_vocab
        << ", \"tie_word_embeddings\": true, \"torch_dtype\": \"float32\"";
    if (gemma)
        cfg << ", \"query_pre_attn_scalar\": " << s.head_dim
            << ", \"rope_local_base_freq\": 10000.0, \"sliding_window_pattern\": 6";
    cfg << ", \"sliding_window\": " << (s.sliding_window > 0 ? std::to_string(s.sliding_window) : "null") << "}";
    write_safetensors_folder(dir, cfg.str(), tensors, shards);
    std::ifstream in(tokenizer_path, std::ios::binary);
    std::ofstream out(dir + "/tokenizer.model", std::ios::binary);
    out << in.rdbuf();
    return m;
}

namespace {

using Vec = std::vector<double>;

// The engine evaluates Gemma's GELU (tanh form) on the fp16 grid, input and output, as llama.cpp
// does; the reference follows that definition, computed here from the formula.
double gelu_on_fp16_grid(double x) {
    if (x <= -10.0) return 0.0;
    if (x >= 10.0) return x;
    const double h = fp16_to_fp32(fp32_to_fp16(static_cast<float>(x)));
    const double y = 0.5 * h * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (h + 0.044715 * h * h * h)));
    return fp16_to_fp32(fp32_to_fp16(static_cast<float>(y)));
}

Vec matvec(const Vec& w, int64_t rows, int64_t cols, const Vec& x) {
    Vec y(static_cast<size_t>(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) s += w[static_cast<size_t>(r * cols + c)] * x[static_cast<size_t>(c)];
        y[static_cast<size_t>(r)] = s;
    }
    return y;
}

// RMS norm of each group of w.size() values.
void rms_norm(Vec& x, const Vec& w, double eps) {
    const size_t n = w.size();
    for (size_t g = 0; g < x.size(); g += n) {
        double ss = 0.0;
        for (size_t i = 0; i < n; ++i) ss += x[g + i] * x[g + i];
        const double s = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
        for (size_t i = 0; i < n; ++i) x[g + i] = x[g + i] * s * w[i];
    }
}

void rope(Vec& x, int n_heads, int hd, int64_t pos, double base, bool half_split) {
    const int half = hd / 2;
    // The angles as llama.cpp defines them: in float, pair i's angle the position times
    // base^(-2/hd) multiplied in i times, as the engine (and llama.cpp) computes them.
    const float theta_scale = std::pow(static_cast<float>(base), -2.0f / static_cast<float>(hd));
    for (int h = 0; h < n_heads; ++h) {
        double* v = x.data() + static_cast<size_t>(h) * hd;
        float th = static_cast<float>(pos);
        for (int i = 0; i < half; ++i, th *= theta_scale) {
            const double c = std::cos(th), s = std::sin(th);
            const int a = half_split ? i : 2 * i, b = half_split ? i + half : 2 * i + 1;
            const double xa = v[a], xb = v[b];
            v[a] = xa * c - xb * s;
            v[b] = xa * s + xb * c;
        }
    }
}

}  // namespace

std::vector<std::vector<double>> reference_logits(const ReferenceModel& m, const std::vector<int32_t>& tokens) {
    const TinyModelSpec& s = m.spec;
    return reference_logits(m, tokens, [&](int il, int64_t p, int64_t j) {
        const int window = tiny_layer_sliding(s, il) ? s.sliding_window : 0;
        return Visibility{window == 0 || p - j < window, p, j};
    });
}

std::vector<std::vector<double>> reference_logits(const ReferenceModel& m, const std::vector<int32_t>& tokens,
                                                  const VisibilityRule& rule) {
    const TinyModelSpec& s = m.spec;
    const bool gemma = s.arch == "gemma3";
    const double eps = 1e-6;
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t q_dim = static_cast<int64_t>(s.n_head) * s.head_dim;
    const int64_t kv_dim = static_cast<int64_t>(s.n_head_kv) * s.head_dim;
    const int group = s.n_head / s.n_head_kv;
    std::vector<Vec> x(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
        x[static_cast<size_t>(t)].assign(m.tok_embd.begin() + tokens[static_cast<size_t>(t)] * s.n_embd,
                                         m.tok_embd.begin() + (tokens[static_cast<size_t>(t)] + 1) * s.n_embd);
        for (double& v : x[static_cast<size_t>(t)]) v *= m.embed_scale;
    }
    for (int il = 0; il < s.n_layer; ++il) {
        const ReferenceModel::Layer& L = m.layers[static_cast<size_t>(il)];
        const bool sliding = tiny_layer_sliding(s, il);
        const double base = gemma && sliding ? 10000.0 : s.rope_base;
        std::vector<Vec> q(static_cast<size_t>(n)), k(static_cast<size_t>(n)), v(static_cast<size_t>(n));
        for (int64_t t = 0; t < n; ++t) {
            Vec xn = x[static_cast<size_t>(t)];
            rms_norm(xn, L.attn_norm, eps);
            q[t] = matvec(L.wq, q_dim, s.n_embd, xn);
            k[t] = matvec(L.wk, kv_dim, s.n_embd, xn);
            v[t] = matvec(L.wv, kv_dim, s.n_embd, xn);
            if (gemma) {
                rms_norm(q[t], L.q_norm, eps);
                rms_norm(k[t], L.k_norm, eps);
            }
        }
        const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
        const auto f16 = [&](double x) {
            return m.f16_attention ? static_cast<double>(fp16_to_fp32(fp32_to_fp16(static_cast<float>(x)))) : x;
        };
        for (int64_t t = 0; t < n; ++t) {
            Vec att(static_cast<size_t>(q_dim), 0.0);
            for (int h = 0; h < s.n_head; ++h) {
                const int g = h / group;
                std::vector<double> sc;
                std::vector<int64_t> js;
                for (int64_t j = 0; j <= t; ++j) {
                    const Visibility vis = rule(il, t, j);
                    if (!vis.visible) continue;
                    Vec qr(q[t].begin() + h * s.head_dim, q[t].begin() + (h + 1) * s.head_dim);
                    Vec kr(k[j].begin() + g * s.head_dim, k[j].begin() + (g + 1) * s.head_dim);
                    rope(qr, 1, s.head_dim, vis.q_pos, base, m.half_split_rope);
                    rope(kr, 1, s.head_dim, vis.k_pos, base, m.half_split_rope);
                    double d = 0.0;
                    for (int i = 0; i < s.head_dim; ++i) d += f16(qr[i] * scale) * f16(kr[i]);
                    sc.push_back(d);
                    js.push_back(j);
                }
                double mx = -1e300, sum = 0.0;
                for (double d : sc) mx = std::max(mx, d);
                for (double& d : sc) sum += (d = std::exp(d - mx));
                for (size_t a = 0; a < js.size(); ++a)
                    for (int i = 0; i < s.head_dim; ++i)
                        att[static_cast<size_t>(h * s.head_dim + i)] += f16(sc[a] / sum) * f16(v[js[a]][g * s.head_dim + i]);
            }
            Vec o = matvec(L.wo, s.n_embd, q_dim, att);
            if (gemma) rms_norm(o, L.post_attn_norm, eps);
            for (int64_t i = 0; i < s.n_embd; ++i) x[t][i] += o[i];
            Vec xn = x[t];
            rms_norm(xn, L.ffn_norm, eps);
            Vec gt = matvec(L.w_gate, s.n_ff, s.n_embd, xn), up = matvec(L.w_up, s.n_ff, s.n_embd, xn);
            for (int64_t i = 0; i < s.n_ff; ++i) {
                const double gv = gt[i];
                const double act = gemma ? gelu_on_fp16_grid(gv) : gv / (1.0 + std::exp(-gv));
                gt[i] = act * up[i];
            }
            Vec d = matvec(L.w_down, s.n_embd, s.n_ff, gt);
            if (gemma) rms_norm(d, L.post_ffn_norm, eps);
            for (int64_t i = 0; i < s.n_embd; ++i) x[t][i] += d[i];
        }
    }
    std::vector<Vec> logits(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
        Vec xn = x[t];
        rms_norm(xn, m.output_norm, eps);
        logits[t] = matvec(m.tok_embd, s.n_vocab, s.n_embd, xn);
    }
    return logits;
}

}  // namespace kvchat::test
