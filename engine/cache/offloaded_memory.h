#pragma once
// A layer's bytes kept in an OffloadTier between uses, lent in the tier's fast buffer while the
// layer is open (LayerMemory).
#include "engine/cache/layer_memory.h"

namespace kvchat {

class OffloadedMemory final : public LayerMemory {
public:
    // index: the layer's place in the tier.
    OffloadedMemory(OffloadTier& tier, int index) : tier_(tier), index_(index) {}
    void start(size_t capacity, bool fixed) override {
        if (fixed) tier_.ensure(index_, capacity);
    }
    uint8_t* open(size_t used, size_t capacity) override { return tier_.acquire(index_, used, capacity); }
    uint8_t* grow(size_t capacity) override { return tier_.grow(index_, capacity); }
    void close(size_t used, size_t lo, size_t hi) override { tier_.release(index_, used, lo, hi); }
    void reserve(size_t bytes) override { tier_.ensure(index_, bytes); }
    void shrink(size_t used) override { tier_.set_size(index_, used); }
    bool adopt_file(int, uint64_t, size_t, size_t) override { return false; }
    bool offloaded() const override { return true; }
    const TierTraffic* traffic() const override { return &tier_.traffic(index_); }

private:
    OffloadTier& tier_;
    int index_;
};

}  // namespace kvchat
