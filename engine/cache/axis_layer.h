#pragma once
// One cache layer assembled from the four axes, each a piece of its own:
//   storage    KvArena: the layer's bytes in one arena, [full-precision slots][residual][quantized
//              blocks], growable or preallocated;
//   precision  the dtype of full-precision records (f16, bf16 or f32), and QuantizedTokens: KIVI
//              blocks behind a residual in that dtype;
//   retention  Retention (all, a ring window, or sinks plus a ring) over SlotPositions, which
//              remembers the position of each full-precision slot;
//   placement  LayerMemory: ResidentMemory, or OffloadedMemory lent by an OffloadTier.
// What the layer holds (the arena, slot positions, quantized tokens and counters) is one
// LayerContents. The layer runs the append, attention and crop over it as backend operations;
// two pieces of their own read and write the same contents: LayerSnapshotFormat (snapshots and
// checkpoints, in the LAYR/LAY2/LAY3 formats) and TokenRowsConversion (TokenRows out and back in,
// for conversion between strategies).
#include "engine/cache/cache_layer.h"
#include "engine/cache/cache_spec.h"
#include "engine/cache/layer_contents.h"
#include "engine/cache/layer_memory.h"
#include "engine/cache/layer_snapshot_format.h"
#include "engine/cache/retention.h"
#include "engine/cache/token_rows_conversion.h"

#include <memory>
#include <optional>

namespace kvchat {

class OffloadTier;

// The new tokens' keys and values in a layer's dtype (keys of all of them, then values), read by
// attention beside the stored ones before they are stored. One per cache, shared by its layers:
// they attend one after another, so a cache holds one chunk's worth, not one per layer (on a GPU
// that fills up, an offloaded cache's memory is then its two layer buffers and this).
struct StagingMemory {
    explicit StagingMemory(Backend& backend) : mem(backend.alloc_kv()) {}
    uint8_t* fit(size_t n) {
        if (bytes < n) {
            mem->resize(n);
            bytes = n;
        }
        return mem->data();
    }
    std::unique_ptr<KvMemory> mem;
    size_t bytes = 0;
};

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
    // The layer's memory comes from `backend`, which also runs every operation on it. staging:
    // the cache's, shared with its other layers (none: the layer's own).
    AxisLayer(const LayerSpec& spec, const LayerConfig& cfg, Backend& backend, OffloadTier* tier, int tier_index,
              std::shared_ptr<StagingMemory> staging = nullptr);

    void attend(Buffer& q, const Buffer& k, const Buffer& v, const int32_t* pos, int64_t n, Buffer& out,
                const std::atomic<bool>* cancel = nullptr) override;
    void crop(int64_t n_tokens) override;
    void reset() override;
    int64_t tokens_held() const override;
    int64_t end_position() const override { return contents_.next_pos; }
    LayerTelemetry telemetry() const override;
    void check_room(int64_t first, int64_t n) const override;
    bool can_crop_to(int64_t n) const override;
    // A ring forgets tokens, and a crop inside a quantized block cannot give back the block's
    // original split between residual and blocks: both go back through saved state.
    bool crop_needs_checkpoint() const override { return !retention_.keeps_all() || !full(); }
    void save_state(std::string& out, int64_t file_offset = -1) const override;
    void load_state(ByteReader& in) override;
    std::string layout() const override;
    using CacheLayer::export_tokens;
    void export_tokens(TokenRows& rows, TokenRows::Form form) const override;
    bool can_import(const TokenRows& rows, int64_t length) const override;
    void import_tokens(const TokenRows& rows, int64_t length) override;

    const LayerConfig& config() const { return cfg_; }
    // The bytes such a layer allocates when it is made (a fixed layer's whole capacity).
    static size_t reserved_bytes(const LayerSpec& spec, const LayerConfig& cfg);

private:
    AxisLayer(const LayerSpec& spec, const LayerConfig& cfg, Backend& backend, OffloadTier* tier, int tier_index,
              std::shared_ptr<StagingMemory> staging, const std::optional<KiviFormat>& kivi);

    bool full() const { return contents_.full(); }
    // A record: the key row, then the value row, kv_dim values each in cfg_.dtype.
    size_t row_bytes() const { return static_cast<size_t>(kv_dim_) * kv_dtype_bytes(cfg_.dtype); }
    // At most the bytes in use once positions [first, first + n) have been added.
    size_t bytes_after(int64_t first, int64_t n) const;
    // layout() without the dtype: what the formats before the dtype was recorded (all f32) wrote.
    std::string layout_core() const;
    LayerSnapshotFormat snapshot_format() const;
    TokenRowsConversion conversion() const;

    LayerSpec spec_;
    LayerConfig cfg_;
    Backend& backend_;
    int64_t kv_dim_;
    Retention retention_;
    std::unique_ptr<LayerMemory> memory_;
    // Mutable for the const save_state and export_tokens, which open the arena (an offloaded
    // layer's bytes come in from the slow tier) but change no token.
    mutable LayerContents contents_;
    std::shared_ptr<StagingMemory> staged_;
};

}  // namespace kvchat
