#pragma once
// The dynamic cache layer: keeps every token in f32 host memory and grows as tokens arrive.
#include "engine/cache/cache_layer.h"

#include <vector>

namespace kvchat {

class ThreadPool;

class GrowableLayer : public CacheLayer {
public:
    GrowableLayer(const LayerSpec& spec, ThreadPool& pool);
    void attend(Buffer& q, const Buffer& k, const Buffer& v, const int32_t* pos, int64_t n, Buffer& out) override;
    void crop(int64_t n_tokens) override;
    void reset() override;
    int64_t tokens_held() const override { return static_cast<int64_t>(pos_.size()); }
    LayerTelemetry telemetry() const override;

private:
    LayerSpec spec_;
    ThreadPool& pool_;
    int64_t kv_dim_;
    std::vector<float> k_, v_;
    std::vector<int32_t> pos_;
};

}  // namespace kvchat
