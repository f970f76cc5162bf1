#pragma once
// A loaded model: hyper-parameters, weights used in place from the file mapping, the tokenizer,
// and the forward pass of its architecture.
#include "engine/cache/cache.h"
#include "engine/compute/backend.h"
#include "engine/compute/matmul.h"
#include "engine/tokenizer/tokenizer.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvchat {

class GgufFile;
class SafetensorsDir;

// The forward passes kvchat has (architectures.h). Llama 3 is Llama with RoPE frequency factors.
enum class Architecture { Gemma3, Llama, Qwen2, Qwen3, Phi3 };
// The forward pass for a GGUF's general.architecture; nullopt when kvchat has none.
std::optional<Architecture> gguf_architecture(const std::string& name);
// The same for a Hugging Face folder's config.json model_type.
std::optional<Architecture> hf_architecture(const std::string& model_type);

struct ModelConfig {
    Architecture arch = Architecture::Llama;
    std::string arch_name;    // as the file names it ("gemma3", "llama", "qwen2", "qwen3", "phi3")
    std::string source;       // "gguf" or "safetensors"
    int n_layer = 0;
    int n_embd = 0;
    int n_head = 0;
    int n_head_kv = 0;
    int head_dim = 0;
    int n_ff = 0;
    int n_vocab = 0;
    int n_ctx_train = 0;
    float rms_eps = 1e-6f;
    float query_scale = 1.0f;         // multiplies q·k
    bool f16_attention = false;       // AttentionShape::f16_rounding: GGUF models, as llama.cpp runs them
    float final_softcap = 0.0f;       // 0 = none
    float attn_softcap = 0.0f;
    float embed_scale = 1.0f;         // token embeddings are multiplied by this
    RopeSpec rope_global;             // RoPE of global-attention layers
    RopeSpec rope_sliding;            // RoPE of sliding-window layers
    int sliding_window = 0;           // 0: no sliding layers
    std::vector<bool> layer_sliding;  // per layer
};

// One layer's weights as the file holds them (host memory). Phi-3's fused matrices (attn_qkv, ffn_up holding gate and up) are held as
// row ranges of the file's tensor, read in place like any other.
struct LayerWeights {
    WeightMatrix wq{}, wk{}, wv{}, wo{};
    WeightMatrix w_gate{}, w_up{}, w_down{};
    BiasVector bq, bk, bv;                                 // Qwen 2 (size 0: none)
    NormWeight attn_norm, q_norm, k_norm, post_attn_norm;  // q/k norms: Gemma 3, Qwen 3; post: Gemma 3
    NormWeight ffn_norm, post_ffn_norm;
};

// One layer's weights on a backend: the handles Backend::place_weights made of LayerWeights.
struct PlacedLayer {
    PlacedMatrix wq, wk, wv, wo;
    PlacedMatrix w_gate, w_up, w_down;
    PlacedVector bq, bk, bv;
    PlacedVector attn_norm, q_norm, k_norm, post_attn_norm;
    PlacedVector ffn_norm, post_ffn_norm;
};

// The model's weights on one backend, what the forward pass computes with: placed all at once the
// first time the model runs on that backend (a GPU uploads them then), kept while both live.
struct BackendWeights {
    PlacedMatrix token_embedding, output;
    PlacedVector output_norm;
    std::vector<PlacedLayer> layers;
    std::unique_ptr<PlacedWeights> handles;  // owns the backend's copies
    std::weak_ptr<const void> backend;       // Backend::lifetime() of the backend they are on
};

// Which positions of a forward pass need logits.
enum class Logits { Last, All, None };

class Model {
public:
    // A GGUF file, or a Hugging Face folder (config.json + *.safetensors + tokenizer.model).
    // Throws kvchat::Error naming the path and the problem (unsupported architecture, tensor
    // type or vocabulary; a missing or misshapen tensor).
    static std::unique_ptr<Model> load(const std::string& path);
    ~Model();

    const ModelConfig& config() const { return config_; }
    const Tokenizer& tokenizer() const { return *tokenizer_; }
    const std::string& fingerprint() const { return fingerprint_; }
    const std::string& path() const { return path_; }
    size_t file_bytes() const { return file_bytes_; }
    // The Jinja chat template the model ships (GGUF tokenizer.chat_template, or the folder's
    // tokenizer_config.json); empty when it has none. Only recognised, never executed.
    const std::string& chat_template() const { return chat_template_; }
    // The file bytes of every tensor as mapped, in file order (to read them in ahead of use).
    std::vector<std::span<const std::byte>> mapped_tensors() const;

    // The attention layout of every layer, from which caches are built.
    std::vector<LayerSpec> layer_specs() const;
    // The `dynamic` cache: global layers keep every token in f32, sliding layers their window.
    std::unique_ptr<Cache> make_default_cache(Backend& backend) const;
    // A cache under a strategy spec (see engine/cache/cache_spec.h); throws kvchat::Error naming
    // the bad parameter.
    std::unique_ptr<Cache> make_cache(Backend& backend, const std::string& spec) const;

    // Runs tokens[0..n) at positions cache.seq_length() onward through the model, in chunks of at
    // most `chunk` tokens, adding them to the cache. Fills `logits` (n_vocab floats per wanted
    // position: the last one, or all n) unless `want` is None. A set `cancel` (from any thread) is
    // seen before every step of a layer and inside attention: kvchat::Cancelled is thrown and the
    // cache keeps the chunks completed before it, so a long prefill stops within about one matrix
    // product's time.
    void forward(Backend& backend, Cache& cache, const int32_t* tokens, int64_t n, Logits want,
                 std::vector<float>& logits, int64_t chunk = 512, const std::atomic<bool>* cancel = nullptr) const;

    // The model's weights on `backend`, for the architectures' forward functions: placed there by
    // the first call with that backend (forward() calls it; a loader may call it to upload the
    // weights before the first answer), the same handles after. Safe from several threads.
    const BackendWeights& weights_on(Backend& backend) const;

    // The weights as the file holds them (host memory).
    const WeightMatrix& token_embedding() const { return tok_embd_; }
    const WeightMatrix& output() const { return output_; }
    const NormWeight& output_norm() const { return output_norm_; }
    const LayerWeights& layer(int i) const { return layers_[static_cast<size_t>(i)]; }

private:
    Model() = default;
    void load_gguf(const std::string& path);
    void load_hf(const std::string& dir);
    // Fills layers_ from the tensors names_of(i) gives for layer i; need(name) finds one or throws.
    template <class Names, class Need>
    void read_layers(Names names_of, Need need, bool norm_plus_one);
    void check_shapes() const;

    std::string path_;
    ModelConfig config_;
    std::unique_ptr<GgufFile> gguf_;
    std::unique_ptr<SafetensorsDir> hf_;
    std::unique_ptr<Tokenizer> tokenizer_;
    std::string fingerprint_;
    std::string chat_template_;
    size_t file_bytes_ = 0;
    WeightMatrix tok_embd_{}, output_{};
    NormWeight output_norm_;
    std::vector<LayerWeights> layers_;
    std::vector<std::vector<float>> norm_store_;  // norm weights and biases converted to f32 (tiny)
    // One entry per backend the model has run on (dropped once its backend is gone).
    mutable std::mutex placed_mu_;
    mutable std::vector<std::unique_ptr<BackendWeights>> placed_;
};

}  // namespace kvchat
