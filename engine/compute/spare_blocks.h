#pragma once
// The activation blocks a backend has handed out, and those given back for reuse: a decode step
// allocates the same few sizes every time, and prefill blocks are large enough that fresh memory
// would cost more than the math. A request takes the smallest spare block that fits and is at most
// twice its size; otherwise the backend's own allocator makes a new one.
#include <cstddef>
#include <map>

namespace kvchat {

class SpareBlocks {
public:
    // A block of at least `bytes`: a spare one, or fresh(rounded) for `bytes` rounded up to a
    // multiple of `granule` (fresh throws when it cannot).
    template <class Fresh>
    float* take(size_t bytes, size_t granule, Fresh&& fresh) {
        auto it = spare_.lower_bound(bytes);
        if (it != spare_.end() && it->first <= 2 * bytes) {
            float* p = it->second;
            out_[p] = it->first;
            spare_.erase(it);
            return p;
        }
        const size_t rounded = (bytes + granule - 1) / granule * granule;
        float* p = fresh(rounded);
        out_[p] = rounded;
        return p;
    }
    // Keeps a block handed out by take() for reuse; anything else is ignored.
    void give_back(float* p) {
        auto it = out_.find(p);
        if (it == out_.end()) return;
        spare_.emplace(it->second, p);
        out_.erase(it);
    }
    // Calls release(p) on every block, spare or handed out, and forgets them all.
    template <class Release>
    void release_all(Release&& release) {
        for (auto& [size, p] : spare_) release(p);
        for (auto& [p, size] : out_) release(p);
        spare_.clear();
        out_.clear();
    }

private:
    std::multimap<size_t, float*> spare_;
    std::map<float*, size_t> out_;
};

}  // namespace kvchat
