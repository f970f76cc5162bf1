#pragma once
// A layer's bytes kept in the backend's KV memory all the time (LayerMemory).
#include "engine/cache/layer_memory.h"
#include "engine/compute/backend.h"

#include <memory>

namespace kvchat {

class ResidentMemory final : public LayerMemory {
public:
    explicit ResidentMemory(Backend& backend) : mem_(backend.alloc_kv()) {}
    void start(size_t capacity, bool) override { mem_->resize(capacity); }
    uint8_t* open(size_t, size_t) override { return mem_->data(); }
    uint8_t* grow(size_t capacity) override {
        mem_->resize(capacity);
        return mem_->data();
    }
    void close(size_t, size_t, size_t) override {}
    void reserve(size_t) override {}
    void shrink(size_t) override {}
    bool adopt_file(int fd, uint64_t offset, size_t len, size_t capacity) override {
        return mem_->adopt_file(fd, offset, len, capacity);
    }
    bool offloaded() const override { return false; }
    const TierTraffic* traffic() const override { return nullptr; }

private:
    std::unique_ptr<KvMemory> mem_;
};

}  // namespace kvchat
