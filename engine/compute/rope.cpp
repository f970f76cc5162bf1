#include "engine/compute/rope.h"

#include <cmath>

namespace kvchat {

RopeAngles::RopeAngles(const RopeSpec& spec) : spec_(spec) {
    const int half = spec.dims / 2;
    cos_.resize(half);
    sin_.resize(half);
}

void rope_cos_sin(const RopeSpec& spec, int64_t pos, float* cos, float* sin) {
    // Exact double angles put rotated keys ~2e-4 off llama.cpp's at position 1,000; these match
    // them to the bit.
    const float theta_scale = std::pow(static_cast<float>(spec.base), -2.0f / static_cast<float>(spec.dims));
    const float freq_scale = static_cast<float>(1.0 / spec.linear_scale);
    float theta = static_cast<float>(pos);
    const size_t half = static_cast<size_t>(spec.dims / 2);
    for (size_t i = 0; i < half; ++i) {
        const float t = rope_pair_angle(spec, freq_scale, theta, i);
        cos[i] = std::cos(t);
        sin[i] = std::sin(t);
        theta *= theta_scale;
    }
}

void RopeAngles::set_position(int64_t pos) { rope_cos_sin(spec_, pos, cos_.data(), sin_.data()); }

// With the contractions llama.cpp's build makes (checked bit for bit against its rotated keys):
// one product rounded, the other fused into the sum.
void RopeAngles::rotate(float* x, int n_heads, int head_dim) const {
    const int half = spec_.dims / 2;
    const float* c = cos_.data();
    const float* s = sin_.data();
    for (int h = 0; h < n_heads; ++h) {
        float* v = x + static_cast<int64_t>(h) * head_dim;
        if (spec_.style == RopeStyle::HalfSplit) {
            for (int i = 0; i < half; ++i) {
                const float a = v[i], b = v[i + half];
                v[i] = std::fma(a, c[i], -(b * s[i]));
                v[i + half] = std::fma(a, s[i], b * c[i]);
            }
        } else {
            for (int i = 0; i < half; ++i) {
                const float a = v[2 * i], b = v[2 * i + 1];
                v[2 * i] = std::fma(a, c[i], -(b * s[i]));
                v[2 * i + 1] = std::fma(a, s[i], b * c[i]);
            }
        }
    }
}

}  // namespace kvchat
