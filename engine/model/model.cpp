#include "engine/model/model.h"

#include "engine/cache/cache_factory.h"
#include "engine/common/regular_file.h"
#include "engine/error.h"
#include "engine/model/architectures.h"
#include "engine/format/gguf_file.h"
#include "engine/model/safetensors_dir.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kvchat {

namespace {

// Limits far beyond any real model, so a corrupt header cannot ask for absurd allocations.
constexpr int64_t kMaxLayers = 1024, kMaxWidth = 1 << 17, kMaxHeads = 1024, kMaxVocab = 1 << 22;

void check_range(const std::string& path, const char* what, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
        throw Error("model '" + path + "': " + what + " = " + std::to_string(v) + " is out of range [" +
                    std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// tokenizer_config.json's "chat_template": a string, or a list of named templates of which the
// "default" one is the chat format. A missing or unparsable file only means "no template"; one
// that is not a regular file (a FIFO, a device) is refused like any other file of the model.
std::string read_hf_chat_template(const std::string& dir) {
    const std::string path = dir + "/tokenizer_config.json";
    std::string text;
    try {
        if (!regular_file_exists(path)) return {};
        text = RegularFile::open(path).read_all(size_t(64) << 20);
    } catch (const Error& e) {
        throw Error(std::string("model file ") + e.what());
    }
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("chat_template")) return {};
    const nlohmann::json& t = j["chat_template"];
    if (t.is_string()) return t.get<std::string>();
    if (t.is_array())
        for (const auto& e : t)
            if (e.is_object() && e.contains("name") && e["name"].is_string() && e["name"].get<std::string>() == "default" &&
                e.contains("template") && e["template"].is_string())
                return e["template"].get<std::string>();
    return {};
}

// Where one layer's weights are in a file; an empty name: the architecture has no such weight.
// qkv: one fused matrix holding q, k and v (then wq, wk, wv are empty); an empty gate with an up:
// up holds gate then up (Phi-3).
struct LayerTensorNames {
    std::string wq, wk, wv, wo, gate, up, down, qkv;
    std::string bq, bk, bv;
    std::string attn_norm, ffn_norm, q_norm, k_norm, post_attn_norm, post_ffn_norm;
};

LayerTensorNames gguf_layer_names(const GgufFile& f, int i, Architecture arch) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerTensorNames n;
    n.wq = p + "attn_q.weight"; n.wk = p + "attn_k.weight"; n.wv = p + "attn_v.weight";
    n.wo = p + "attn_output.weight";
    n.gate = p + "ffn_gate.weight"; n.up = p + "ffn_up.weight"; n.down = p + "ffn_down.weight";
    n.attn_norm = p + "attn_norm.weight"; n.ffn_norm = p + "ffn_norm.weight";
    if (arch == Architecture::Gemma3) {
        n.post_attn_norm = p + "post_attention_norm.weight";
        n.post_ffn_norm = p + "post_ffw_norm.weight";
    }
    if (arch == Architecture::Gemma3 || arch == Architecture::Qwen3) {
        n.q_norm = p + "attn_q_norm.weight";
        n.k_norm = p + "attn_k_norm.weight";
    }
    if (arch == Architecture::Qwen2) {
        n.bq = p + "attn_q.bias"; n.bk = p + "attn_k.bias"; n.bv = p + "attn_v.bias";
    }
    if (arch == Architecture::Phi3) {
        // Phi-3's converter fuses q, k and v; llama.cpp also takes them apart.
        if (f.tensor(p + "attn_qkv.weight")) {
            n.qkv = p + "attn_qkv.weight";
            n.wq.clear(), n.wk.clear(), n.wv.clear();
        }
        n.gate.clear();
    }
    return n;
}

// Gemma's feed-forward norm is "pre_feedforward_layernorm" and its "post_attention_layernorm"
// follows attention; Llama's "post_attention_layernorm" is the feed-forward norm.
LayerTensorNames hf_layer_names(const std::string& prefix, int i, bool gemma) {
    const std::string p = prefix + "layers." + std::to_string(i) + ".";
    LayerTensorNames n;
    n.wq = p + "self_attn.q_proj.weight"; n.wk = p + "self_attn.k_proj.weight"; n.wv = p + "self_attn.v_proj.weight";
    n.wo = p + "self_attn.o_proj.weight";
    n.gate = p + "mlp.gate_proj.weight"; n.up = p + "mlp.up_proj.weight"; n.down = p + "mlp.down_proj.weight";
    n.attn_norm = p + "input_layernorm.weight"; n.ffn_norm = p + "post_attention_layernorm.weight";
    if (gemma) {
        n.ffn_norm = p + "pre_feedforward_layernorm.weight";
        n.q_norm = p + "self_attn.q_norm.weight";
        n.k_norm = p + "self_attn.k_norm.weight";
        n.post_attn_norm = p + "post_attention_layernorm.weight";
        n.post_ffn_norm = p + "post_feedforward_layernorm.weight";
    }
    return n;
}

// A real-valued hyper-parameter: finite and strictly between lo and hi. (A NaN epsilon would make
// every norm NaN and the model print padding; a zero one divides by zero on a zero row.)
std::string shown(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);  // 1e-06, not std::to_string's 0.000001
    return buf;
}

double check_real(const std::string& path, const std::string& key, double v, double lo, double hi) {
    if (!(std::isfinite(v) && v > lo && v < hi))
        throw Error("model '" + path + "': " + key + " = " + shown(v) + " is out of range (" + shown(lo) + ", " +
                    shown(hi) + ")");
    return v;
}

// A logit soft-capping value: 0 turns it off; otherwise a positive finite cap.
double check_softcap(const std::string& path, const std::string& key, double v) {
    return v == 0.0 ? 0.0 : check_real(path, key, v, 0.0, 1e6);
}

// llama.cpp's llama_ftype values that files carry (4 and 33-35 in older files; 5 and 6 were
// dropped before GGUF existed; 1024 marks a guessed type).
bool known_file_type(uint64_t t) { return t <= 4 || (t >= 7 && t <= 38) || t == 1024; }

bool is_directory(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::optional<Architecture> gguf_architecture(const std::string& name) {
    if (name == "gemma3") return Architecture::Gemma3;
    if (name == "llama" || name == "mistral") return Architecture::Llama;
    if (name == "qwen2") return Architecture::Qwen2;
    if (name == "qwen3") return Architecture::Qwen3;
    if (name == "phi3") return Architecture::Phi3;
    return std::nullopt;
}

std::optional<Architecture> hf_architecture(const std::string& model_type) {
    if (model_type == "gemma3" || model_type == "gemma3_text") return Architecture::Gemma3;
    if (model_type == "llama" || model_type == "mistral") return Architecture::Llama;
    return std::nullopt;
}

Model::~Model() = default;

std::unique_ptr<Model> Model::load(const std::string& path) {
    std::unique_ptr<Model> m(new Model());
    m->path_ = path;
    if (is_directory(path))
        m->load_hf(path);
    else
        m->load_gguf(path);
    m->check_shapes();
    return m;
}

std::vector<std::span<const std::byte>> Model::mapped_tensors() const {
    const std::vector<TensorView>& all = gguf_ ? gguf_->tensors() : hf_->tensors();
    std::vector<std::span<const std::byte>> out;
    out.reserve(all.size());
    for (const TensorView& t : all) out.emplace_back(static_cast<const std::byte*>(t.data), t.nbytes);
    return out;
}

// A norm weight vector as f32 owned by the model, optionally with 1 added (Gemma's HF checkpoints
// store w where the model multiplies by 1 + w; GGUF converters already added it).
static NormWeight own_norm(std::vector<std::vector<float>>& store, const TensorView& t, bool add_one) {
    if (t.n_dims != 1) throw Error("norm tensor '" + t.name + "' is not a vector");
    std::vector<float> v(static_cast<size_t>(t.elements()));
    dequantize_row(t.type, t.data, v.data(), t.elements());
    if (add_one)
        for (float& x : v) x += 1.0f;
    store.push_back(std::move(v));
    return NormWeight{store.back().data(), static_cast<int64_t>(store.back().size())};
}

static WeightMatrix as_matrix(const TensorView& t) {
    if (t.n_dims != 2 || t.ne[2] != 1 || t.ne[3] != 1)
        throw Error("tensor '" + t.name + "' is not a 2-D matrix (" + std::to_string(t.n_dims) + " dimensions)");
    return WeightMatrix{t.type, t.ne[1], t.ne[0], t.data};
}

// Rows [first, first + count) of w: a matrix of its own, read in place (every row of a GGUF or
// safetensors matrix starts on a block boundary).
static WeightMatrix row_range(const WeightMatrix& w, int64_t first, int64_t count) {
    return WeightMatrix{w.type, count, w.cols,
                        static_cast<const uint8_t*>(w.data) + static_cast<size_t>(first) * row_bytes(w.type, w.cols)};
}

// norm_plus_one: the file stores w for a model that multiplies by 1 + w (Gemma's HF checkpoints).
template <class Names, class Need>
void Model::read_layers(Names names_of, Need need, bool norm_plus_one) {
    const ModelConfig& c = config_;
    const int64_t q_dim = int64_t(c.n_head) * c.head_dim, kv_dim = int64_t(c.n_head_kv) * c.head_dim;
    layers_.resize(static_cast<size_t>(config_.n_layer));
    for (int i = 0; i < config_.n_layer; ++i) {
        const LayerTensorNames n = names_of(i);
        LayerWeights& w = layers_[static_cast<size_t>(i)];
        if (!n.qkv.empty()) {
            const WeightMatrix qkv = as_matrix(need(n.qkv));
            if (qkv.rows != q_dim + 2 * kv_dim)
                throw Error("model '" + path_ + "': tensor '" + n.qkv + "' has " + std::to_string(qkv.rows) +
                            " rows, expected " + std::to_string(q_dim + 2 * kv_dim) + " (q, k and v)");
            w.wq = row_range(qkv, 0, q_dim);
            w.wk = row_range(qkv, q_dim, kv_dim);
            w.wv = row_range(qkv, q_dim + kv_dim, kv_dim);
        } else {
            w.wq = as_matrix(need(n.wq));
            w.wk = as_matrix(need(n.wk));
            w.wv = as_matrix(need(n.wv));
        }
        w.wo = as_matrix(need(n.wo));
        if (n.gate.empty()) {
            const WeightMatrix gate_up = as_matrix(need(n.up));
            if (gate_up.rows != 2 * int64_t(c.n_ff))
                throw Error("model '" + path_ + "': tensor '" + n.up + "' has " + std::to_string(gate_up.rows) +
                            " rows, expected " + std::to_string(2 * int64_t(c.n_ff)) + " (gate and up)");
            w.w_gate = row_range(gate_up, 0, c.n_ff);
            w.w_up = row_range(gate_up, c.n_ff, c.n_ff);
        } else {
            w.w_gate = as_matrix(need(n.gate));
            w.w_up = as_matrix(need(n.up));
        }
        w.w_down = as_matrix(need(n.down));
        auto norm = [&](const std::string& name, NormWeight& out) {
            if (!name.empty()) out = own_norm(norm_store_, need(name), norm_plus_one);
        };
        norm(n.attn_norm, w.attn_norm);
        norm(n.ffn_norm, w.ffn_norm);
        norm(n.q_norm, w.q_norm);
        norm(n.k_norm, w.k_norm);
        norm(n.post_attn_norm, w.post_attn_norm);
        norm(n.post_ffn_norm, w.post_ffn_norm);
        auto bias = [&](const std::string& name, BiasVector& out) {
            if (name.empty()) return;
            const NormWeight v = own_norm(norm_store_, need(name), false);
            out = BiasVector{v.data, v.size};
        };
        bias(n.bq, w.bq);
        bias(n.bk, w.bk);
        bias(n.bv, w.bv);
    }
}

void Model::load_gguf(const std::string& path) {
    gguf_ = GgufFile::open(path);
    const GgufFile& f = *gguf_;
    ModelConfig& c = config_;
    c.source = "gguf";
    c.arch_name = f.get_string("general.architecture");
    if (const auto arch = gguf_architecture(c.arch_name))
        c.arch = *arch;
    else
        throw Error("model '" + path + "': unsupported architecture '" + c.arch_name +
                    "' (kvchat runs gemma3, llama, mistral, qwen2, qwen3 and phi3 models)");
    const std::string a = c.arch_name + ".";
    c.n_layer = static_cast<int>(f.get_uint(a + "block_count"));
    check_range(path, "block_count", c.n_layer, 1, kMaxLayers);
    c.n_embd = static_cast<int>(f.get_uint(a + "embedding_length"));
    check_range(path, "embedding_length", c.n_embd, 1, kMaxWidth);
    c.n_ff = static_cast<int>(f.get_uint(a + "feed_forward_length"));
    check_range(path, "feed_forward_length", c.n_ff, 1, 8 * kMaxWidth);
    c.n_head = static_cast<int>(f.get_uint(a + "attention.head_count"));
    check_range(path, "attention.head_count", c.n_head, 1, kMaxHeads);
    c.n_head_kv = static_cast<int>(f.get_uint(a + "attention.head_count_kv", static_cast<uint64_t>(c.n_head)));
    check_range(path, "attention.head_count_kv", c.n_head_kv, 1, c.n_head);
    c.head_dim = static_cast<int>(f.get_uint(a + "attention.key_length", static_cast<uint64_t>(c.n_embd / c.n_head)));
    check_range(path, "attention.key_length", c.head_dim, 2, 4096);
    const int64_t v_len = static_cast<int64_t>(f.get_uint(a + "attention.value_length", static_cast<uint64_t>(c.head_dim)));
    if (v_len != c.head_dim)
        throw Error("model '" + path + "': attention.value_length " + std::to_string(v_len) +
                    " differs from key_length " + std::to_string(c.head_dim) + " (not supported)");
    c.n_ctx_train = static_cast<int>(std::min<uint64_t>(f.get_uint(a + "context_length", 4096), 1u << 24));
    check_range(path, (a + "context_length").c_str(), c.n_ctx_train, 1, 1 << 24);
    c.rms_eps = static_cast<float>(
        check_real(path, a + "attention.layer_norm_rms_epsilon", f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-6),
                   0.0, 1.0));
    // Absent: no sliding layers. Present, a window of no tokens cannot be meant.
    c.sliding_window = static_cast<int>(std::min<uint64_t>(f.get_uint(a + "attention.sliding_window", 0), 1u << 24));
    if (f.find(a + "attention.sliding_window"))
        check_range(path, (a + "attention.sliding_window").c_str(), c.sliding_window, 1, 1 << 24);
    if (f.find("general.file_type") && !known_file_type(f.get_uint("general.file_type")))
        throw Error("model '" + path + "': general.file_type = " + std::to_string(f.get_uint("general.file_type")) +
                    " is not a GGUF file type");
    const int rope_dims = static_cast<int>(f.get_uint(a + "rope.dimension_count", static_cast<uint64_t>(c.head_dim)));
    if (rope_dims != c.head_dim)
        throw Error("model '" + path + "': partial rotary embeddings (rope.dimension_count " +
                    std::to_string(rope_dims) + " of " + std::to_string(c.head_dim) + ") are not supported");
    const std::string scaling = f.get_string(a + "rope.scaling.type", "none");
    double scale = 1.0;
    if (scaling == "linear")
        scale = f.get_float(a + "rope.scaling.factor", 1.0);
    else if (scaling != "none")
        throw Error("model '" + path + "': RoPE scaling '" + scaling + "' is not supported (none or linear)");
    if (!(scale >= 1.0 && scale < 1e6))
        throw Error("model '" + path + "': " + a + "rope.scaling.factor = " + shown(scale) +
                    " is out of range [1, 1e6)");
    const double base = f.get_float(a + "rope.freq_base", 10000.0);
    check_real(path, a + "rope.freq_base", base, 1.0, 1e12);

    c.final_softcap = static_cast<float>(
        check_softcap(path, a + "final_logit_softcapping", f.get_float(a + "final_logit_softcapping", 0.0)));
    c.attn_softcap = static_cast<float>(
        check_softcap(path, a + "attn_logit_softcapping", f.get_float(a + "attn_logit_softcapping", 0.0)));
    c.query_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    // GGUF models are held to llama.cpp, whose default KV cache is f16.
    c.f16_attention = true;
    c.layer_sliding.assign(static_cast<size_t>(c.n_layer), false);
    if (c.arch == Architecture::Gemma3) {
        // Gemma 3: layer i is sliding unless (i + 1) is a multiple of 6. Sliding layers use the
        // local RoPE base of 10,000, which the GGUF does not store.
        c.embed_scale = std::sqrt(static_cast<float>(c.n_embd));
        c.rope_global = RopeSpec{RopeStyle::HalfSplit, c.head_dim, base, scale, {}};
        c.rope_sliding = RopeSpec{RopeStyle::HalfSplit, c.head_dim, 10000.0, 1.0, {}};
        for (int i = 0; i < c.n_layer; ++i) c.layer_sliding[static_cast<size_t>(i)] = c.sliding_window > 0 && i % 6 < 5;
    } else if (c.arch == Architecture::Llama) {
        // llama.cpp's converter permutes Llama's q/k weights for adjacent-pair rotation.
        c.rope_global = RopeSpec{RopeStyle::Interleaved, c.head_dim, base, scale, {}};
        // Llama 3's RoPE scaling: its converter stores the per-pair frequency divisors.
        if (const TensorView* ff = f.tensor("rope_freqs.weight")) {
            if (ff->n_dims != 1 || ff->elements() != c.head_dim / 2)
                throw Error("model '" + path + "': tensor 'rope_freqs.weight' has " + std::to_string(ff->elements()) +
                            " values, expected " + std::to_string(c.head_dim / 2) + " (one per rotated pair)");
            c.rope_global.freq_factors.resize(static_cast<size_t>(c.head_dim / 2));
            dequantize_row(ff->type, ff->data, c.rope_global.freq_factors.data(), ff->elements());
            for (float v : c.rope_global.freq_factors)
                if (!(std::isfinite(v) && v > 0.0f))
                    throw Error("model '" + path + "': tensor 'rope_freqs.weight' holds " + shown(v) +
                                ", not a positive frequency factor");
        }
        c.rope_sliding = c.rope_global;
        for (int i = 0; i < c.n_layer; ++i) c.layer_sliding[static_cast<size_t>(i)] = c.sliding_window > 0;
    } else {
        // Qwen 2, Qwen 3, Phi-3: rotate-half RoPE, every layer global. llama.cpp ignores the
        // sliding window their GGUFs may state (Phi-3's is disabled there, Qwen's unused), and so
        // does kvchat, to compute what it computes.
        if (c.arch == Architecture::Phi3 && (f.tensor("rope_factors_long.weight") || f.tensor("blk.0.rope_factors_long.weight")))
            throw Error("model '" + path + "': Phi-3's long-context RoPE (rope_factors_long/short) is not supported");
        c.sliding_window = 0;
        c.rope_global = RopeSpec{RopeStyle::HalfSplit, c.head_dim, base, scale, {}};
        c.rope_sliding = c.rope_global;
    }

    tokenizer_ = Tokenizer::from_gguf(f);
    fingerprint_ = f.fingerprint();
    if (const GgufValue* t = f.find("tokenizer.chat_template"); t && t->type == GgufType::STRING)
        chat_template_ = f.get_string("tokenizer.chat_template");
    file_bytes_ = f.file_size();

    auto need = [&](const std::string& name) -> const TensorView& {
        const TensorView* t = f.tensor(name);
        if (!t) throw Error("model '" + path + "': tensor '" + name + "' is missing");
        return *t;
    };
    tok_embd_ = as_matrix(need("token_embd.weight"));
    const TensorView* out = f.tensor("output.weight");
    output_ = out ? as_matrix(*out) : tok_embd_;  // tied embeddings when there is no output matrix
    output_norm_ = own_norm(norm_store_, need("output_norm.weight"), false);
    c.n_vocab = static_cast<int>(tok_embd_.rows);
    read_layers([&](int i) { return gguf_layer_names(f, i, c.arch); }, need, false);
}

// A Hugging Face folder. Gemma's checkpoints store norm weights w where the model multiplies by
// 1 + w, and every HF checkpoint uses rotate-half RoPE on unpermuted q/k weights.
void Model::load_hf(const std::string& dir) {
    hf_ = SafetensorsDir::open(dir);
    const SafetensorsDir& f = *hf_;
    nlohmann::json cfg = f.config();
    // config.json is user data: every value is checked for its type before use, and a wrong one
    // is reported with its key (nlohmann's own exceptions would name neither file nor key).
    auto text = [&](const nlohmann::json& obj, const std::string& key, const std::string& shown,
                    const std::string& fallback) -> std::string {
        if (!obj.contains(key) || obj[key].is_null()) return fallback;
        if (!obj[key].is_string()) throw Error("model '" + dir + "': config.json '" + shown + "' is not a string");
        return obj[key].get<std::string>();
    };
    const std::string type = text(cfg, "model_type", "model_type", "");
    if (type == "gemma3" && cfg.contains("text_config")) {  // multimodal wrapper
        if (!cfg["text_config"].is_object()) throw Error("model '" + dir + "': config.json 'text_config' is not an object");
        const nlohmann::json inner = cfg["text_config"];
        cfg = inner;
    }
    ModelConfig& c = config_;
    c.source = "safetensors";
    c.arch_name = type;
    if (const auto arch = hf_architecture(type))
        c.arch = *arch;
    else
        throw Error("model '" + dir + "': unsupported model_type '" + type +
                    "' in config.json (kvchat runs gemma3 and llama-family models)");
    const bool gemma = c.arch == Architecture::Gemma3;
    auto num = [&](const char* key, double fallback, bool required) -> double {
        if (!cfg.contains(key) || cfg[key].is_null()) {
            if (required) throw Error("model '" + dir + "': config.json lacks '" + key + "'");
            return fallback;
        }
        if (!cfg[key].is_number()) throw Error("model '" + dir + "': config.json '" + key + "' is not a number");
        return cfg[key].get<double>();
    };
    auto count = [&](const char* key, double fallback, bool required, int64_t lo, int64_t hi) {
        const double v = num(key, fallback, required);
        if (!(v >= static_cast<double>(lo) && v <= static_cast<double>(hi)) || v != std::floor(v))
            throw Error("model '" + dir + "': config.json '" + key + "' = " + shown(v) + " is out of range");
        return static_cast<int>(v);
    };
    c.n_layer = count("num_hidden_layers", 0, true, 1, kMaxLayers);
    c.n_embd = count("hidden_size", 0, true, 1, kMaxWidth);
    c.n_ff = count("intermediate_size", 0, true, 1, 8 * kMaxWidth);
    c.n_head = count("num_attention_heads", 0, true, 1, kMaxHeads);
    c.n_head_kv = count("num_key_value_heads", c.n_head, false, 1, c.n_head);
    c.head_dim = count("head_dim", c.n_embd / c.n_head, false, 2, 4096);
    c.n_ctx_train = count("max_position_embeddings", 4096, false, 1, 1 << 24);
    c.rms_eps = static_cast<float>(check_real(dir, "config.json 'rms_norm_eps'", num("rms_norm_eps", 1e-6, false), 0.0, 1.0));
    const double base = num("rope_theta", 10000.0, false);
    double scale = 1.0;
    if (cfg.contains("rope_scaling") && !cfg["rope_scaling"].is_null()) {
        const auto& rs = cfg["rope_scaling"];
        if (!rs.is_object()) throw Error("model '" + dir + "': config.json 'rope_scaling' is not an object");
        const std::string kind =
            text(rs, "rope_type", "rope_scaling.rope_type", text(rs, "type", "rope_scaling.type", "default"));
        if (kind == "linear") {
            if (!rs.contains("factor") || !rs["factor"].is_number())
                throw Error("model '" + dir + "': config.json 'rope_scaling.factor' is missing or not a number");
            scale = rs["factor"].get<double>();
        } else if (kind != "default") {
            throw Error("model '" + dir + "': RoPE scaling '" + kind + "' is not supported (none or linear)");
        }
    }
    // Absent or null: no sliding layers. Present, a window of no tokens cannot be meant.
    const bool has_window = cfg.contains("sliding_window") && !cfg["sliding_window"].is_null();
    c.sliding_window = has_window ? count("sliding_window", 0, true, 1, 1 << 24) : 0;
    c.final_softcap =
        static_cast<float>(check_softcap(dir, "config.json 'final_logit_softcapping'", num("final_logit_softcapping", 0.0, false)));
    c.attn_softcap =
        static_cast<float>(check_softcap(dir, "config.json 'attn_logit_softcapping'", num("attn_logit_softcapping", 0.0, false)));
    c.layer_sliding.assign(static_cast<size_t>(c.n_layer), false);
    if (gemma) {
        c.query_scale = static_cast<float>(1.0 / std::sqrt(check_real(dir, "config.json 'query_pre_attn_scalar'",
                                                                      num("query_pre_attn_scalar", c.head_dim, false), 0.0, 1e9)));
        c.embed_scale = std::sqrt(static_cast<float>(c.n_embd));
        c.rope_global = RopeSpec{RopeStyle::HalfSplit, c.head_dim, base, scale, {}};
        c.rope_sliding = RopeSpec{RopeStyle::HalfSplit, c.head_dim,
                                  check_real(dir, "config.json 'rope_local_base_freq'", num("rope_local_base_freq", 10000.0, false), 1.0, 1e12),
                                  1.0, {}};
        const int pattern = count("sliding_window_pattern", 6, false, 1, 1 << 20);
        for (int i = 0; i < c.n_layer; ++i) c.layer_sliding[static_cast<size_t>(i)] = c.sliding_window > 0 && (i + 1) % pattern != 0;
    } else {
        c.query_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
        c.rope_global = RopeSpec{RopeStyle::HalfSplit, c.head_dim, base, scale, {}};
        c.rope_sliding = c.rope_global;
        for (int i = 0; i < c.n_layer; ++i) c.layer_sliding[static_cast<size_t>(i)] = c.sliding_window > 0;
    }
    if (cfg.contains("layer_types") && !cfg["layer_types"].is_null()) {
        const auto& lt = cfg["layer_types"];
        if (!lt.is_array()) throw Error("model '" + dir + "': config.json 'layer_types' is not a list");
        if (lt.size() != static_cast<size_t>(c.n_layer))
            throw Error("model '" + dir + "': config.json 'layer_types' has " + std::to_string(lt.size()) +
                        " entries for " + std::to_string(c.n_layer) + " layers");
        for (size_t i = 0; i < lt.size(); ++i) {
            const std::string kind = lt[i].is_string() ? lt[i].get<std::string>() : std::string();
            if (kind != "sliding_attention" && kind != "full_attention")
                throw Error("model '" + dir + "': config.json 'layer_types[" + std::to_string(i) +
                            "]' is not \"sliding_attention\" or \"full_attention\"");
            c.layer_sliding[i] = kind == "sliding_attention";
        }
        if (c.sliding_window == 0 && std::count(c.layer_sliding.begin(), c.layer_sliding.end(), true) > 0)
            throw Error("model '" + dir + "': config.json 'layer_types' has sliding layers but 'sliding_window' is not set");
    }
    check_real(dir, "config.json 'rope_theta'", base, 1.0, 1e12);
    if (!(scale >= 1.0 && scale < 1e6))
        throw Error("model '" + dir + "': config.json 'rope_scaling.factor' = " + shown(scale) +
                    " is out of range [1, 1e6)");

    if (f.tokenizer_model_path().empty())
        throw Error("model '" + dir + "': tokenizer.model is missing (kvchat reads SentencePiece tokenizers)");
    tokenizer_ = Tokenizer::from_file(f.tokenizer_model_path());
    fingerprint_ = f.fingerprint();
    chat_template_ = read_hf_chat_template(dir);
    for (const TensorView& t : f.tensors()) file_bytes_ += t.nbytes;

    std::string prefix;
    for (const char* p : {"model.", "language_model.model.", "model.language_model."})
        if (f.tensor(std::string(p) + "embed_tokens.weight")) {
            prefix = p;
            break;
        }
    if (prefix.empty()) throw Error("model '" + dir + "': tensor 'model.embed_tokens.weight' is missing");
    auto need = [&](const std::string& name) -> const TensorView& {
        const TensorView* t = f.tensor(name);
        if (!t) throw Error("model '" + dir + "': tensor '" + name + "' is missing");
        return *t;
    };
    tok_embd_ = as_matrix(need(prefix + "embed_tokens.weight"));
    const TensorView* head = f.tensor("lm_head.weight");
    if (cfg.contains("tie_word_embeddings") && !cfg["tie_word_embeddings"].is_null() &&
        !cfg["tie_word_embeddings"].is_boolean())
        throw Error("model '" + dir + "': config.json 'tie_word_embeddings' is not true or false");
    const bool tied = cfg.contains("tie_word_embeddings") && cfg["tie_word_embeddings"].is_boolean()
                          ? cfg["tie_word_embeddings"].get<bool>()
                          : gemma;
    output_ = head && !tied ? as_matrix(*head) : tok_embd_;
    output_norm_ = own_norm(norm_store_, need(prefix + "norm.weight"), gemma);
    c.n_vocab = static_cast<int>(tok_embd_.rows);
    read_layers([&](int i) { return hf_layer_names(prefix, i, gemma); }, need, gemma);
}

void Model::check_shapes() const {
    const ModelConfig& c = config_;
    const std::string& path = path_;
    check_range(path, "vocabulary size", c.n_vocab, 1, kMaxVocab);
    if (c.n_head % c.n_head_kv != 0 || c.n_head / c.n_head_kv > 16)
        throw Error("model '" + path + "': " + std::to_string(c.n_head) + " query heads over " +
                    std::to_string(c.n_head_kv) + " kv heads is not a supported grouping");
    if (c.head_dim % 2 != 0) throw Error("model '" + path + "': odd head size " + std::to_string(c.head_dim));
    if (tokenizer_->vocab_size() > c.n_vocab)
        throw Error("model '" + path + "': the tokenizer has " + std::to_string(tokenizer_->vocab_size()) +
                    " tokens but the embedding only " + std::to_string(c.n_vocab));
    auto expect = [&](const WeightMatrix& w, int64_t rows, int64_t cols, const std::string& what) {
        if (w.rows != rows || w.cols != cols)
            throw Error("model '" + path + "': " + what + " is " + std::to_string(w.rows) + "x" +
                        std::to_string(w.cols) + ", expected " + std::to_string(rows) + "x" + std::to_string(cols));
    };
    auto expect_norm = [&](const NormWeight& w, int64_t size, const std::string& what) {
        if (w.size != size)
            throw Error("model '" + path + "': " + what + " has " + std::to_string(w.size) + " weights, expected " +
                        std::to_string(size));
    };
    const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
    const int64_t kv_dim = static_cast<int64_t>(c.n_head_kv) * c.head_dim;
    expect(tok_embd_, c.n_vocab, c.n_embd, "the token embedding");
    expect(output_, c.n_vocab, c.n_embd, "the output matrix");
    expect_norm(output_norm_, c.n_embd, "the output norm");
    for (int i = 0; i < c.n_layer; ++i) {
        const LayerWeights& w = layers_[static_cast<size_t>(i)];
        const std::string l = "layer " + std::to_string(i) + " ";
        expect(w.wq, q_dim, c.n_embd, l + "q projection");
        expect(w.wk, kv_dim, c.n_embd, l + "k projection");
        expect(w.wv, kv_dim, c.n_embd, l + "v projection");
        expect(w.wo, c.n_embd, q_dim, l + "output projection");
        expect(w.w_gate, c.n_ff, c.n_embd, l + "gate projection");
        expect(w.w_up, c.n_ff, c.n_embd, l + "up projection");
        expect(w.w_down, c.n_embd, c.n_ff, l + "down projection");
        expect_norm(w.attn_norm, c.n_embd, l + "attention norm");
        expect_norm(w.ffn_norm, c.n_embd, l + "feed-forward norm");
        if (c.arch == Architecture::Gemma3 || c.arch == Architecture::Qwen3) {
            expect_norm(w.q_norm, c.head_dim, l + "q norm");
            expect_norm(w.k_norm, c.head_dim, l + "k norm");
        }
        if (c.arch == Architecture::Qwen2) {
            expect_norm(NormWeight{w.bq.data, w.bq.size}, q_dim, l + "q bias");
            expect_norm(NormWeight{w.bk.data, w.bk.size}, kv_dim, l + "k bias");
            expect_norm(NormWeight{w.bv.data, w.bv.size}, kv_dim, l + "v bias");
        }
        if (c.arch == Architecture::Gemma3) {
            expect_norm(w.post_attn_norm, c.n_embd, l + "post-attention norm");
            expect_norm(w.post_ffn_norm, c.n_embd, l + "post-feed-forward norm");
        }
    }
}

std::vector<LayerSpec> Model::layer_specs() const {
    const ModelConfig& c = config_;
    std::vector<LayerSpec> specs(static_cast<size_t>(c.n_layer));
    for (int i = 0; i < c.n_layer; ++i) {
        LayerSpec& s = specs[static_cast<size_t>(i)];
        const bool sliding = c.layer_sliding[static_cast<size_t>(i)];
        s.index = i;
        s.shape = AttentionShape{c.n_head, c.n_head_kv, c.head_dim, c.query_scale, c.attn_softcap, c.f16_attention};
        s.rope = sliding ? c.rope_sliding : c.rope_global;
        s.model_window = sliding ? c.sliding_window : 0;
        s.kv_dtype = c.f16_attention ? KvDtype::F16 : KvDtype::F32;
    }
    return specs;
}

std::unique_ptr<Cache> Model::make_default_cache(Backend& backend) const { return make_cache(backend, "dynamic"); }

std::unique_ptr<Cache> Model::make_cache(Backend& backend, const std::string& spec) const {
    return kvchat::make_cache(layer_specs(), spec, backend);
}

const BackendWeights& Model::weights_on(Backend& backend) const {
    const std::weak_ptr<const void> alive = backend.lifetime();
    std::lock_guard lock(placed_mu_);
    // A backend that is gone can no longer be running with its copies: free them.
    std::erase_if(placed_, [](const std::unique_ptr<BackendWeights>& w) { return w->backend.expired(); });
    for (const auto& w : placed_)
        if (!w->backend.owner_before(alive) && !alive.owner_before(w->backend)) return *w;

    // Every weight once, in one set: a tied output matrix is the embedding's own entry.
    WeightSet set;
    set.file_mapped = gguf_ != nullptr;
    auto matrix = [&](const WeightMatrix& w) {
        set.matrices.push_back(w);
        return set.matrices.size() - 1;
    };
    auto vector = [&](const float* data, int64_t size) -> std::ptrdiff_t {
        if (size == 0) return -1;
        set.vectors.push_back(NormWeight{data, size});
        return static_cast<std::ptrdiff_t>(set.vectors.size()) - 1;
    };
    struct LayerIndices {
        size_t wq, wk, wv, wo, gate, up, down;
        std::ptrdiff_t bq, bk, bv, attn_norm, q_norm, k_norm, post_attn_norm, ffn_norm, post_ffn_norm;
    };
    const size_t embd = matrix(tok_embd_);
    const bool tied = output_.data == tok_embd_.data && output_.type == tok_embd_.type && output_.rows == tok_embd_.rows &&
                      output_.cols == tok_embd_.cols;
    const size_t out = tied ? embd : matrix(output_);
    const std::ptrdiff_t out_norm = vector(output_norm_.data, output_norm_.size);
    std::vector<LayerIndices> idx;
    idx.reserve(layers_.size());
    for (const LayerWeights& l : layers_)
        idx.push_back({matrix(l.wq), matrix(l.wk), matrix(l.wv), matrix(l.wo), matrix(l.w_gate), matrix(l.w_up),
                       matrix(l.w_down), vector(l.bq.data, l.bq.size), vector(l.bk.data, l.bk.size),
                       vector(l.bv.data, l.bv.size), vector(l.attn_norm.data, l.attn_norm.size),
                       vector(l.q_norm.data, l.q_norm.size), vector(l.k_norm.data, l.k_norm.size),
                       vector(l.post_attn_norm.data, l.post_attn_norm.size), vector(l.ffn_norm.data, l.ffn_norm.size),
                       vector(l.post_ffn_norm.data, l.post_ffn_norm.size)});

    auto placed = std::make_unique<BackendWeights>();
    placed->handles = backend.place_weights(set);
    const PlacedWeights& h = *placed->handles;
    if (h.matrices.size() != set.matrices.size() || h.vectors.size() != set.vectors.size())
        throw Error("backend " + backend.name() + " placed " + std::to_string(h.matrices.size()) + " of " +
                    std::to_string(set.matrices.size()) + " weight matrices");
    auto vec = [&](std::ptrdiff_t i) { return i < 0 ? PlacedVector{} : h.vectors[static_cast<size_t>(i)]; };
    placed->token_embedding = h.matrices[embd];
    placed->output = h.matrices[out];
    placed->output_norm = vec(out_norm);
    placed->layers.reserve(idx.size());
    for (const LayerIndices& i : idx)
        placed->layers.push_back({h.matrices[i.wq], h.matrices[i.wk], h.matrices[i.wv], h.matrices[i.wo],
                                  h.matrices[i.gate], h.matrices[i.up], h.matrices[i.down], vec(i.bq), vec(i.bk),
                                  vec(i.bv), vec(i.attn_norm), vec(i.q_norm), vec(i.k_norm), vec(i.post_attn_norm),
                                  vec(i.ffn_norm), vec(i.post_ffn_norm)});
    placed->backend = alive;
    placed_.push_back(std::move(placed));
    return *placed_.back();
}

void Model::forward(Backend& be, Cache& cache, const int32_t* tokens, int64_t n, Logits want,
                    std::vector<float>& logits, int64_t chunk, const std::atomic<bool>* cancel) const {
    const ModelConfig& c = config_;
    if (n <= 0) throw Error("nothing to run: the input has no tokens");
    for (int64_t i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= c.n_vocab)
            throw Error("token id " + std::to_string(tokens[i]) + " is outside the vocabulary (0.." +
                        std::to_string(c.n_vocab - 1) + ")");
    if (cache.n_layers() != static_cast<size_t>(c.n_layer))
        throw Error("the cache has " + std::to_string(cache.n_layers()) + " layers, the model " +
                    std::to_string(c.n_layer));
    if (chunk <= 0) chunk = 512;
    cache.check_room(n);
    const BackendWeights& weights = weights_on(be);
    logits.clear();
    std::vector<int32_t> pos;
    for (int64_t off = 0; off < n; off += chunk) {
        const int64_t m = std::min(chunk, n - off);
        pos.resize(static_cast<size_t>(m));
        for (int64_t i = 0; i < m; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(cache.seq_length() + i);
        Buffer hidden = be.alloc(m, c.n_embd);
        try {
            switch (c.arch) {
                case Architecture::Gemma3: forward_gemma3(*this, be, cache, tokens + off, pos.data(), m, hidden, cancel); break;
                case Architecture::Qwen2: forward_qwen2(*this, be, cache, tokens + off, pos.data(), m, hidden, cancel); break;
                case Architecture::Qwen3: forward_qwen3(*this, be, cache, tokens + off, pos.data(), m, hidden, cancel); break;
                case Architecture::Llama:
                case Architecture::Phi3:  // Llama's pass over the fused weights' parts (llama.cpp)
                    forward_llama(*this, be, cache, tokens + off, pos.data(), m, hidden, cancel);
                    break;
            }
        } catch (...) {
            // Some layers took the chunk and some did not (e.g. a full disk under an offloaded
            // cache): put every layer back at the tokens the cache reports.
            be.free(hidden);
            cache.roll_back();
            throw;
        }
        cache.append_tokens(tokens + off, m);

        const bool last_chunk = off + m == n;
        if (want == Logits::All || (want == Logits::Last && last_chunk)) {
            Buffer rows = hidden;
            Buffer picked{};
            if (want == Logits::Last) {
                picked = be.alloc(1, c.n_embd);
                be.gather_rows(hidden, {m - 1}, picked);
                rows = picked;
            }
            Buffer lg = be.alloc(rows.rows, c.n_vocab);
            be.matmul(weights.output, rows, rows.rows, lg);
            if (c.final_softcap > 0.0f) be.softcap(lg, rows.rows, c.final_softcap);
            const size_t at = logits.size();
            logits.resize(at + static_cast<size_t>(rows.rows) * static_cast<size_t>(c.n_vocab));
            be.read(lg, rows.rows, logits.data() + at);
            be.free(lg);
            if (picked.data) be.free(picked);
        }
        be.free(hidden);
    }
}

}  // namespace kvchat
