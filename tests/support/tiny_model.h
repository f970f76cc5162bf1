#pragma once
// Tiny random-weight models for exact tests, and a naive double-precision reference forward
// written independently of the engine (it shares only dequantize_row, which test_tensor_type
// checks against gguf-py).
#include "engine/compute/tensor_type.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kvchat::test {

class GgufWriter;

struct TinyModelSpec {
    std::string arch = "gemma3";  // "gemma3" or "llama"
    int n_layer = 6;
    int n_embd = 256;
    int n_head = 4;
    int n_head_kv = 2;
    int head_dim = 64;
    int n_ff = 512;
    int n_vocab = 384;             // >= the tokenizer's 259 pieces (specials + bytes) + a few words
    int sliding_window = 4;        // gemma3: window of the sliding layers; llama: 0 or a Mistral window
    TensorType weight_type = TensorType::F32;
    uint32_t seed = 1;
    double rope_base = 1000000.0;  // global layers; Gemma's sliding layers use 10,000
    int n_ctx = 2048;              // the context length the metadata states
    std::string chat_template;     // tokenizer.chat_template; empty: the key is left out
    // Applied to the complete GGUF metadata just before the file is written (write_tiny_gguf), so a
    // test can change one key of an otherwise valid model.
    std::function<void(GgufWriter&)> edit_gguf;
};

// Weights as the reference uses them: matrices row-major rows x cols in double.
struct ReferenceModel {
    TinyModelSpec spec;
    struct Layer {
        std::vector<double> wq, wk, wv, wo, w_gate, w_up, w_down;
        std::vector<double> attn_norm, q_norm, k_norm, post_attn_norm, ffn_norm, post_ffn_norm;
    };
    std::vector<double> tok_embd, output_norm;
    std::vector<Layer> layers;
    bool half_split_rope = true;  // rotate-half (Gemma, HF) or adjacent pairs (llama GGUF)
    double embed_scale = 1.0;
    // GGUF models attend as llama.cpp does: scaled queries, rotated keys, values and softmax
    // probabilities on the fp16 grid (the engine's AttentionShape::f16_rounding).
    bool f16_attention = false;
};

// The small Gemma-shaped model the chat, window and lab suites talk to: narrow layers (answers in
// milliseconds) and a sliding window of 8, so checkpoints and windows come into play within a
// few turns.
inline TinyModelSpec chat_sized_spec(int n_layer = 6) {
    TinyModelSpec spec;
    spec.n_layer = n_layer;
    spec.n_embd = 64;
    spec.n_head = 2;
    spec.n_head_kv = 1;
    spec.head_dim = 32;
    spec.n_ff = 128;
    spec.sliding_window = 8;
    return spec;
}

// Writes a GGUF file with random weights of spec.weight_type (norms F32) and a small
// SentencePiece vocabulary; returns the weights exactly as stored (dequantized to double).
ReferenceModel write_tiny_gguf(const TinyModelSpec& spec, const std::string& path);

// Writes a Hugging Face folder (config.json, safetensors in `dtype` "F32"/"F16"/"BF16" split over
// `shards` files, and a copy of the tokenizer.model at tokenizer_path). Gemma's norms are stored
// the HF way (the model multiplies by 1 + w); the returned reference holds what the model uses.
ReferenceModel write_tiny_hf(const TinyModelSpec& spec, const std::string& dir, const std::string& dtype,
                             const std::string& tokenizer_path, int shards);

// Logits (n_vocab doubles) at every position of `tokens`, positions 0..n-1, each query seeing
// the tokens at positions q <= p (and p - q < window on sliding layers).
std::vector<std::vector<double>> reference_logits(const ReferenceModel& m, const std::vector<int32_t>& tokens);

// Which earlier tokens a query sees on a layer, and the positions RoPE rotates the query and the
// key at (a cache may re-position tokens, as a sink cache does).
struct Visibility {
    bool visible = false;
    int64_t q_pos = 0;
    int64_t k_pos = 0;
};
using VisibilityRule = std::function<Visibility(int layer, int64_t query, int64_t key)>;

// reference_logits with an explicit rule per (layer, query position, key position <= query).
std::vector<std::vector<double>> reference_logits(const ReferenceModel& m, const std::vector<int32_t>& tokens,
                                                  const VisibilityRule& rule);

// Largest |engine - reference| over every logit (got: n x n_vocab floats), relative to the
// reference logits' largest magnitude.
double relative_error(const std::vector<float>& got, const std::vector<std::vector<double>>& want, int64_t n_vocab);

// Whether layer il of the spec is a sliding-window layer.
bool tiny_layer_sliding(const TinyModelSpec& spec, int il);

}  // namespace kvchat::test
