#pragma once
// The storage axis of a cache layer: its bytes in one arena of three regions,
// [full-precision slots][residual][quantized blocks]. A growable layer's regions grow as tokens
// come (only the last region in use ever grows, so growth never moves data); a fixed layer's are
// allocated up front. The bytes themselves come from the layer's LayerMemory (placement), which
// lends them between open() and close(); the arena records which bytes changed meanwhile, so an
// offloaded layer writes back only those.
#include "engine/cache/layer_memory.h"
#include "engine/cache/slot_positions.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace kvchat {

class KvArena {
public:
    // record: bytes of one full-precision token (key row, value row); block: bytes of one quantized
    // block (0: none). slots, residual, blocks: the regions' first capacities; slot_limit: most
    // slots the layer may ever have.
    KvArena(LayerMemory& memory, int layer_index, size_t record, size_t block, int64_t slots, int64_t slot_limit,
            int64_t residual, int64_t blocks, bool fixed);

    size_t record_bytes() const { return rec_; }
    uint8_t* slot(int64_t i) const { return base_ + slot_offset(i); }
    uint8_t* residual_slot(int64_t i) const { return base_ + residual_offset(i); }
    uint8_t* block(int32_t record) const { return base_ + block_offset(record); }
    size_t slot_offset(int64_t i) const { return static_cast<size_t>(i) * rec_; }
    size_t residual_offset(int64_t i) const { return res_off_ + static_cast<size_t>(i) * rec_; }
    size_t block_offset(int32_t record) const { return blk_off_ + static_cast<size_t>(record) * blk_; }

    int64_t slot_capacity() const { return slot_cap_; }
    int64_t slot_limit() const { return slot_limit_; }
    int64_t residual_capacity() const { return res_cap_; }
    int64_t block_capacity() const { return blk_cap_; }
    int64_t blocks_used() const { return blk_used_; }

    // Bytes in use with `slots` slots written (a quantized layer's: through its last block), and
    // allocated; bytes_with: in use with `slots` slots or `blocks` blocks.
    size_t used_bytes(int64_t slots) const { return bytes_with(slots, blk_used_); }
    size_t capacity_bytes() const { return capacity_bytes(rec_, blk_, slot_cap_, res_cap_, blk_cap_); }
    // The same for an arena of these regions (the constructor's arguments), before it is made.
    static size_t capacity_bytes(size_t record, size_t block, int64_t slots, int64_t residual, int64_t blocks) {
        return static_cast<size_t>(slots + residual) * record + static_cast<size_t>(blocks) * block;
    }
    size_t bytes_with(int64_t slots, int64_t blocks) const {
        return quantized() ? blk_off_ + static_cast<size_t>(blocks) * blk_ : static_cast<size_t>(slots) * rec_;
    }

    // Room for slot need - 1 (growing by doubling, to at least 16); throws kvchat::Error past the limit.
    void grow_slots(int64_t need);
    // A new block record at the end of the block region (which doubles when full).
    int32_t add_block();
    // Room for at least n blocks.
    void reserve_blocks(int64_t n);
    void clear_blocks() { blk_used_ = 0; }
    // Maps a snapshot's n_slots full records at `offset` of fd as slots, in a region of `capacity`
    // slots (>= the current one), instead of copying them; false when it cannot (nothing changed).
    bool adopt_slots(int fd, uint64_t offset, int64_t n_slots, int64_t capacity);

    // The bytes are valid between open() and close() (given the bytes in use then). An
    // offloaded layer writes back the range marked changed.
    void open(size_t used) const;
    void close(size_t used) const;
    void mark(size_t lo, size_t hi) const {
        dirty_lo_ = std::min(dirty_lo_, lo);
        dirty_hi_ = std::max(dirty_hi_, hi);
    }
    LayerMemory& memory() const { return memory_; }

    // Opens the arena for one operation and closes it (writing changes to the slow tier) even when
    // the operation throws. slots: the layer's slot positions, whose slots written give the bytes in use.
    class Use {
    public:
        Use(const KvArena& arena, const SlotPositions& slots) : arena_(arena), slots_(slots) {
            arena_.open(arena_.used_bytes(slots_.used()));
        }
        // Closes now; errors of the write-back reach the caller.
        void finish() {
            done_ = true;
            arena_.close(arena_.used_bytes(slots_.used()));
        }
        ~Use() {
            if (!done_) try {
                    arena_.close(arena_.used_bytes(slots_.used()));
                } catch (...) {
                }
        }
        Use(const Use&) = delete;
        Use& operator=(const Use&) = delete;

    private:
        const KvArena& arena_;
        const SlotPositions& slots_;
        bool done_ = false;
    };

private:
    bool quantized() const { return res_cap_ > 0; }
    void place(int64_t slots);
    void grow_to(int64_t slots, int64_t blocks);

    LayerMemory& memory_;
    int layer_index_;
    size_t rec_, blk_;
    int64_t slot_cap_, slot_limit_;
    int64_t res_cap_, blk_cap_, blk_used_ = 0;
    size_t res_off_ = 0, blk_off_ = 0;
    mutable uint8_t* base_ = nullptr;
    mutable size_t dirty_lo_ = 0, dirty_hi_ = 0;
};

}  // namespace kvchat
