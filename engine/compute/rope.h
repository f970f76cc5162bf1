#pragma once
// Rotary position embedding, applied by the cache layers (so a layer that re-positions tokens,
// like a sink cache, can rotate with the positions it chooses).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvchat {

enum class RopeStyle {
    Interleaved,  // pairs (2i, 2i+1): llama.cpp's Llama GGUFs (weights permuted by the converter)
    HalfSplit,    // pairs (i, i + d/2), "rotate_half": Hugging Face checkpoints, Gemma, NEOX
};

struct RopeSpec {
    RopeStyle style = RopeStyle::HalfSplit;
    int dims = 0;               // rotated dimensions per head (the head size for supported models)
    double base = 10000.0;
    double linear_scale = 1.0;  // positions are divided by this ("linear" RoPE scaling)
    // Llama 3's scaling (its GGUF's rope_freqs.weight): pair i's frequency is divided by
    // freq_factors[i] (dims / 2 values); empty: 1 for every pair.
    std::vector<float> freq_factors;
};

// Pair i's angle at position theta (pair 0's): freq_scale * (theta / factor_i), as ggml's rope
// cache computes it (an empty factor list divides by 1, which changes nothing).
inline float rope_pair_angle(const RopeSpec& spec, float freq_scale, float theta, size_t i) {
    return freq_scale * (spec.freq_factors.empty() ? theta : theta / spec.freq_factors[i]);
}

// The cos and sin of every pair's angle at position pos (spec.dims / 2 of each): in float, the
// angle of pair i built by repeated multiplication with base^(-2/dims), as llama.cpp (ggml's rope
// cache) does. Both backends take their angles from here (the CUDA one uploads them).
void rope_cos_sin(const RopeSpec& spec, int64_t pos, float* cos, float* sin);

// The cos/sin pairs of one position, computed once and applied to every head of q and k.
class RopeAngles {
public:
    explicit RopeAngles(const RopeSpec& spec);
    void set_position(int64_t pos);
    // Rotates n_heads heads of head_dim floats at x in place (head_dim >= spec.dims).
    void rotate(float* x, int n_heads, int head_dim) const;

private:
    RopeSpec spec_;
    std::vector<float> cos_, sin_;
};

}  // namespace kvchat
