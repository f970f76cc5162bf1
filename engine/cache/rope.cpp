#include "engine/cache/rope.h"

#include <cmath>

namespace kvchat {

RopeAngles::RopeAngles(const RopeSpec& spec) : spec_(spec) {
    const int half = spec.dims / 2;
    inv_freq_.resize(half);
    cos_.resize(half);
    sin_.resize(half);
    for (int i = 0; i < half; ++i) inv_freq_[i] = std::pow(spec.base, -2.0 * i / spec.dims) / spec.linear_scale;
}

void RopeAngles::set_position(int64_t pos) {
    // Angles in double, rounded once: stays accurate at long positions.
    for (size_t i = 0; i < inv_freq_.size(); ++i) {
        const double theta = static_cast<double>(pos) * inv_freq_[i];
        cos_[i] = static_cast<float>(std::cos(theta));
        sin_[i] = static_cast<float>(std::sin(theta));
    }
}

void RopeAngles::rotate(float* x, int n_heads, int head_dim) const {
    const int half = spec_.dims / 2;
    const float* c = cos_.data();
    const float* s = sin_.data();
    for (int h = 0; h < n_heads; ++h) {
        float* v = x + static_cast<int64_t>(h) * head_dim;
        if (spec_.style == RopeStyle::HalfSplit) {
            for (int i = 0; i < half; ++i) {
                const float a = v[i], b = v[i + half];
                v[i] = a * c[i] - b * s[i];
                v[i + half] = a * s[i] + b * c[i];
            }
        } else {
            for (int i = 0; i < half; ++i) {
                const float a = v[2 * i], b = v[2 * i + 1];
                v[2 * i] = a * c[i] - b * s[i];
                v[2 * i + 1] = a * s[i] + b * c[i];
            }
        }
    }
}

}  // namespace kvchat
