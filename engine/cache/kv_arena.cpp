#include "engine/cache/kv_arena.h"

#include "engine/error.h"

#include <string>

namespace kvchat {

KvArena::KvArena(LayerMemory& memory, int layer_index, size_t record, size_t block, int64_t slots, int64_t slot_limit,
                 int64_t residual, int64_t blocks, bool fixed)
    : memory_(memory), layer_index_(layer_index), rec_(record), blk_(block), slot_cap_(slots), slot_limit_(slot_limit),
      res_cap_(residual), blk_cap_(blocks) {
    place(slot_cap_);
    memory_.start(capacity_bytes(), fixed);
}

void KvArena::place(int64_t slots) {
    slot_cap_ = slots;
    res_off_ = static_cast<size_t>(slots) * rec_;
    blk_off_ = res_off_ + static_cast<size_t>(res_cap_) * rec_;
}

void KvArena::open(size_t used) const {
    dirty_lo_ = std::numeric_limits<size_t>::max();
    dirty_hi_ = 0;
    base_ = memory_.open(used, capacity_bytes());
}

void KvArena::close(size_t used) const {
    if (!memory_.offloaded()) return;
    const size_t lo = dirty_lo_ < dirty_hi_ ? dirty_lo_ : 0, hi = dirty_lo_ < dirty_hi_ ? dirty_hi_ : 0;
    base_ = nullptr;
    memory_.close(used, lo, hi);
}

// The regions take their new sizes only once the memory holds them: a growth that fails (out of
// memory: std::bad_alloc, or a spill file's error) leaves the arena as it was, so the layer never
// writes past what it has.
void KvArena::grow_to(int64_t slots, int64_t blocks) {
    const int64_t old_slots = slot_cap_, old_blocks = blk_cap_;
    place(slots);
    blk_cap_ = blocks;
    try {
        base_ = memory_.grow(capacity_bytes());
    } catch (...) {
        place(old_slots);
        blk_cap_ = old_blocks;
        throw;
    }
}

void KvArena::grow_slots(int64_t need) {
    if (need > slot_limit_)
        throw Error("cache layer " + std::to_string(layer_index_) + ": no room for slot " + std::to_string(need - 1));
    grow_to(std::min<int64_t>(slot_limit_, std::max<int64_t>({need, 2 * slot_cap_, 16})), blk_cap_);
}

int32_t KvArena::add_block() {
    if (blk_used_ == blk_cap_) grow_to(slot_cap_, std::max<int64_t>(4, 2 * blk_cap_));
    return static_cast<int32_t>(blk_used_++);
}

void KvArena::reserve_blocks(int64_t n) {
    if (blk_cap_ >= n) return;
    grow_to(slot_cap_, n);
}

bool KvArena::adopt_slots(int fd, uint64_t offset, int64_t n_slots, int64_t capacity) {
    const int64_t old = slot_cap_;
    place(capacity);
    if (!memory_.adopt_file(fd, offset, static_cast<size_t>(n_slots) * rec_, capacity_bytes())) {
        place(old);
        return false;
    }
    base_ = memory_.open(0, capacity_bytes());
    return true;
}

}  // namespace kvchat
