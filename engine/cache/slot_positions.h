#pragma once
// Which position each slot of a cache layer holds: the bookkeeping everything else rests on (as
// llama.cpp keeps its llama_kv_cells apart from the tensors). A query at position p sees a slot
// at position q when q <= p and q is a sink, or the layer has no window, or p - q < window; ring
// buffers, sinks, crops, chunked prefill and snapshots all follow from that one rule.
//
// Two ways to place positions: in order (slot i holds the i-th position kept; a layer that keeps
// every token), or sinks then a ring (positions below `sinks` in slots [0, sinks), every later
// position p in slot sinks + (p - sinks) % ring).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvchat {

class SlotPositions {
public:
    static constexpr int32_t kEmpty = INT32_MAX;

    static SlotPositions in_order() { return SlotPositions(true, 0, 0); }
    static SlotPositions ring(int sinks, int ring) { return SlotPositions(false, sinks, ring); }

    // The visibility rule.
    static bool visible(int32_t query, int32_t key, int window, int sink_end) {
        return key <= query && (key < sink_end || window == 0 || query - key < window);
    }

    bool ordered() const { return ordered_; }
    // The slot position p goes to (in order: the next one).
    int64_t slot_for(int32_t p) const {
        if (ordered_) return used_;
        if (p < sinks_) return p;
        return sinks_ + (p - sinks_) % ring_;
    }
    int64_t capacity() const { return static_cast<int64_t>(pos_.size()); }
    // More slots, empty; never fewer.
    void grow(int64_t capacity);
    // Slot i (< capacity) now holds p; true when it overwrote a token.
    bool put(int64_t i, int32_t p);
    // Slots [0, used) have been written since the last clear: the length of the layer's view.
    int64_t used() const { return used_; }
    const int32_t* positions() const { return pos_.data(); }
    int32_t at(int64_t i) const { return pos_[static_cast<size_t>(i)]; }
    // Slots holding a token.
    int64_t held() const;
    // The oldest position >= from held (kEmpty if none).
    int32_t oldest(int32_t from) const;
    // Forgets every position >= n.
    void crop(int32_t n);
    void clear();
    // Whether n slot positions (as save() gives them) are a state these slots can hold when
    // positions below `next` have been seen; assign() takes such a state (capacity >= n).
    bool valid(const int32_t* pos, int64_t n, int32_t next) const;
    void assign(const int32_t* pos, int64_t n);

private:
    SlotPositions(bool ordered, int sinks, int ring) : ordered_(ordered), sinks_(sinks), ring_(ring) {}
    bool ordered_;
    int sinks_, ring_;
    std::vector<int32_t> pos_;
    int64_t used_ = 0;
};

}  // namespace kvchat
