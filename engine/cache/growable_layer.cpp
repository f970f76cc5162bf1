#include "engine/cache/growable_layer.h"

#include "engine/cache/attention.h"

#include <algorithm>
#include <cstring>

namespace kvchat {

GrowableLayer::GrowableLayer(const LayerSpec& spec, ThreadPool& pool)
    : spec_(spec), pool_(pool), kv_dim_(static_cast<int64_t>(spec.shape.n_head_kv) * spec.shape.head_dim) {}

void GrowableLayer::attend(Buffer& q, const Buffer& k, const Buffer& v, const int32_t* pos, int64_t n, Buffer& out) {
    const AttentionShape& s = spec_.shape;
    const int64_t old = tokens_held();
    k_.resize(static_cast<size_t>((old + n) * kv_dim_));
    v_.resize(static_cast<size_t>((old + n) * kv_dim_));
    std::memcpy(k_.data() + old * kv_dim_, k.data, sizeof(float) * n * kv_dim_);
    std::memcpy(v_.data() + old * kv_dim_, v.data, sizeof(float) * n * kv_dim_);
    pos_.insert(pos_.end(), pos, pos + n);

    RopeAngles angles(spec_.rope);
    for (int64_t t = 0; t < n; ++t) {
        angles.set_position(pos[t]);
        angles.rotate(q.data + t * s.n_head * s.head_dim, s.n_head, s.head_dim);
        angles.rotate(k_.data() + (old + t) * kv_dim_, s.n_head_kv, s.head_dim);
    }
    SlotView view{k_.data(), v_.data(), pos_.data(), tokens_held(), kv_dim_};
    attend_slots(q.data, pos, n, view, s, spec_.model_window, out.data, pool_);
}

void GrowableLayer::crop(int64_t n_tokens) {
    // Slots are in position order, so the tokens to keep are a prefix.
    const auto keep = std::lower_bound(pos_.begin(), pos_.end(), static_cast<int32_t>(n_tokens)) - pos_.begin();
    pos_.resize(static_cast<size_t>(keep));
    k_.resize(static_cast<size_t>(keep * kv_dim_));
    v_.resize(static_cast<size_t>(keep * kv_dim_));
}

void GrowableLayer::reset() {
    pos_.clear();
    k_.clear();
    v_.clear();
}

LayerTelemetry GrowableLayer::telemetry() const {
    LayerTelemetry t;
    t.kind = spec_.model_window > 0 ? "sliding" : "global";
    t.storage = "growable f32";
    t.tokens_held = tokens_held();
    t.capacity = static_cast<int64_t>(k_.capacity() / std::max<int64_t>(kv_dim_, 1));
    t.bytes_fast = 2 * static_cast<int64_t>(sizeof(float)) * t.tokens_held * kv_dim_;
    t.bytes_full_precision = t.bytes_fast;
    if (!pos_.empty()) {
        t.window_begin = pos_.front();
        t.window_end = pos_.back() + 1;
    }
    return t;
}

}  // namespace kvchat
