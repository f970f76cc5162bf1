#pragma once
// One cache layer assembled from the four axes: storage (growable or preallocated), precision
// (f16, bf16 or f32, or KIVI blocks behind a residual in one of those), retention (all, a ring window, or
// sinks plus a ring) and placement (resident, or in an OffloadTier between uses).
//
// The layer's bytes live in one arena: [full-precision slots][residual][quantized blocks]; only the last
// region in use ever grows, so growth never moves data. Positions and block bookkeeping stay in
// ordinary memory (a few bytes per token), so crops and telemetry never touch the arena.
#include "engine/cache/cache_layer.h"
#include "engine/cache/cache_spec.h"
#include "engine/compute/kivi_block.h"
#include "engine/cache/slot_positions.h"

#include <deque>
#include <vector>

namespace kvchat {

class OffloadTier;

// One layer's resolved axes.
struct LayerConfig {
    RetentionKind retention = RetentionKind::All;
    int window = 0;      // SlidingWindow: tokens kept; Sink: tokens kept including the sinks
    int sinks = 0;
    bool fixed = false;  // capacity allocated up front
    int64_t max_len = 0; // All + fixed: positions the layer may hold
    KvDtype dtype = KvDtype::F16;  // full-precision slots, residual and sinks
    int nbits = 0;       // 0: full precision
    int residual = 128, group = 64;
    bool offloaded = false;
};

class AxisLayer : public CacheLayer {
public:
    // tier: the cache's slow tier when cfg.offloaded (tier_index: this layer's place in it).
    // The layer's memory comes from `backend`, which also runs every operation on it.
    AxisLayer(const LayerSpec& spec, const LayerConfig& cfg, Backend& backend, OffloadTier* tier, int tier_index);

    void attend(Buffer& q, const Buffer& k, const Buffer& v, const int32_t* pos, int64_t n, Buffer& out) override;
    void crop(int64_t n_tokens) override;
    void reset() override;
    int64_t tokens_held() const override;
    int64_t end_position() const override { return next_pos_; }
    LayerTelemetry telemetry() const override;
    void check_room(int64_t first, int64_t n) const override;
    bool can_crop_to(int64_t n) const override;
    // A ring forgets tokens, and a crop inside a quantized block cannot give back the block's
    // original split between residual and blocks: both go back through saved state.
    bool crop_needs_checkpoint() const override { return cfg_.retention != RetentionKind::All || !full(); }
    void save_state(std::string& out, int64_t file_offset = -1) const override;
    void load_state(ByteReader& in) override;
    std::string layout() const override;
    void export_tokens(TokenRows& rows) const override;
    bool can_import(const TokenRows& rows, int64_t length) const override;
    void import_tokens(const TokenRows& rows, int64_t length) override;

    const LayerConfig& config() const { return cfg_; }

private:
    static constexpr int32_t kEmpty = SlotPositions::kEmpty;
    struct Block {
        int32_t first = 0;
        int32_t count = 0;
        int32_t record = 0;
    };

    bool full() const { return cfg_.nbits == 0; }
    bool ordered() const { return slots_.ordered(); }
    // A record: the key row, then the value row, kv_dim values each in cfg_.dtype.
    size_t row_bytes() const { return static_cast<size_t>(kv_dim_) * kv_dtype_bytes(cfg_.dtype); }
    size_t rec_bytes() const { return 2 * row_bytes(); }
    uint8_t* slot(int64_t i) const { return base_ + static_cast<size_t>(i) * rec_bytes(); }
    uint8_t* res_slot(int64_t i) const { return base_ + res_off_ + static_cast<size_t>(i) * rec_bytes(); }
    uint8_t* block_data(int32_t rec) const { return base_ + blk_off_ + static_cast<size_t>(rec) * kivi_.block_bytes; }
    size_t used_bytes() const;
    size_t capacity_bytes() const;
    // At most used_bytes() once positions [first, first + n) have been added.
    size_t bytes_after(int64_t first, int64_t n) const;
    void grow_slots(int64_t need);
    void mark(size_t lo, size_t hi) {
        dirty_lo_ = std::min(dirty_lo_, lo);
        dirty_hi_ = std::max(dirty_hi_, hi);
    }
    // Arena access: the bytes are valid between begin() and end() (the slow tier lends them).
    void begin() const;
    void end() const;
    // k, v: rows in cfg_.dtype.
    void store(int32_t p, const void* k, const void* v);
    void quantize_oldest();
    void evict_before(int32_t keep_from);
    // The first row import_tokens may put in the residual (see there).
    size_t import_from(const TokenRows& rows, int64_t length) const;
    int32_t oldest_recent() const;  // oldest non-sink position held; kEmpty if none
    void clear_meta();
    // layout() without the dtype: what the formats before the dtype was recorded (all f32) wrote.
    std::string layout_core() const;

    LayerSpec spec_;
    LayerConfig cfg_;
    Backend& backend_;
    OffloadTier* tier_;
    int tier_index_;
    int64_t kv_dim_;
    int recent_ = 0;    // mask window for non-sink tokens (0: none)
    int sink_end_ = 0;  // positions below are sinks
    KiviFormat kivi_;

    // arena layout
    int64_t slot_cap_ = 0, slot_limit_ = 0;
    size_t res_off_ = 0, blk_off_ = 0;
    int64_t res_cap_ = 0, blk_cap_ = 0, blk_used_ = 0;
    std::unique_ptr<KvMemory> resident_;  // resident layers' memory, from the backend
    mutable uint8_t* base_ = nullptr;
    mutable size_t dirty_lo_ = 0, dirty_hi_ = 0;

    // bookkeeping
    SlotPositions slots_;  // of the full-precision slots (a quantized layer's: its sinks)
    std::deque<Block> blocks_;
    std::vector<int32_t> free_records_;
    int32_t res_first_ = 0;
    int64_t res_count_ = 0;
    std::vector<int32_t> res_pos_;
    int32_t next_pos_ = 0;
    int64_t evicted_ = 0;
};

}  // namespace kvchat
