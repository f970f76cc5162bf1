#pragma once
// Token selection from logits, with the Hugging Face `generate` order: repetition penalty, then
// temperature, top-k, top-p and min-p, then a draw from what remains (or argmax when greedy).
#include <cstdint>
#include <random>
#include <vector>

namespace kvchat {

struct SamplerConfig {
    bool greedy = false;
    float temperature = 0.8f;
    int top_k = 40;           // 0: off
    float top_p = 0.95f;      // 1: off
    float min_p = 0.05f;      // 0: off
    float repetition_penalty = 1.0f;  // 1: off; > 1 discourages tokens already in the context
    uint64_t seed = 0;
};

// Throws kvchat::Error naming the parameter when a value is out of range.
void validate(const SamplerConfig& c);

class Sampler {
public:
    explicit Sampler(const SamplerConfig& c);
    // Picks the next token from n_vocab logits; `context` is every token so far (for the penalty).
    int32_t sample(const float* logits, int64_t n_vocab, const std::vector<int32_t>& context);

private:
    SamplerConfig c_;
    std::mt19937_64 rng_;
    std::vector<float> work_;
    std::vector<std::pair<float, int32_t>> cand_;
};

}  // namespace kvchat
