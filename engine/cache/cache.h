#pragma once
// A model's KV cache: one CacheLayer per model layer, plus the token ids it holds in order
// (the history a rebuild re-prefills from).
#include "engine/cache/cache_layer.h"

#include <memory>
#include <vector>

namespace kvchat {

class Cache {
public:
    explicit Cache(std::vector<std::unique_ptr<CacheLayer>> layers) : layers_(std::move(layers)) {}

    size_t n_layers() const { return layers_.size(); }
    CacheLayer& layer(size_t i) { return *layers_[i]; }
    const CacheLayer& layer(size_t i) const { return *layers_[i]; }

    // Tokens seen so far; the next token goes at this position.
    int64_t seq_length() const { return static_cast<int64_t>(tokens_.size()); }
    const std::vector<int32_t>& tokens() const { return tokens_; }
    void append_tokens(const int32_t* ids, int64_t n) { tokens_.insert(tokens_.end(), ids, ids + n); }

    // Keeps the first n tokens.
    void crop(int64_t n) {
        if (n >= seq_length()) return;
        for (auto& l : layers_) l->crop(n);
        tokens_.resize(static_cast<size_t>(n));
    }
    void reset() {
        for (auto& l : layers_) l->reset();
        tokens_.clear();
    }
    int64_t bytes() const {
        int64_t b = 0;
        for (auto& l : layers_) {
            const LayerTelemetry t = l->telemetry();
            b += t.bytes_fast + t.bytes_slow;
        }
        return b;
    }

private:
    std::vector<std::unique_ptr<CacheLayer>> layers_;
    std::vector<int32_t> tokens_;
};

}  // namespace kvchat
