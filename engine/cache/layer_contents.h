#pragma once
// What one cache layer holds: its bytes (KvArena), which position each full-precision slot holds
// (SlotPositions), its quantized tokens when it quantizes (QuantizedTokens), and its counters.
// The layer's append and attention (AxisLayer), its snapshot format (LayerSnapshotFormat) and
// its conversion to and from TokenRows (TokenRowsConversion) all read and write these, and
// store() is the one way a token enters them.
#include "engine/cache/kv_arena.h"
#include "engine/cache/quantized_tokens.h"
#include "engine/cache/retention.h"
#include "engine/cache/slot_positions.h"
#include "engine/compute/backend.h"

#include <optional>

namespace kvchat {

class LayerContents {
public:
    LayerContents(KvArena arena, SlotPositions slots, std::optional<QuantizedTokens> quant);

    // Full precision only (no quantized tokens).
    bool full() const { return !quant; }
    size_t record_bytes() const { return arena.record_bytes(); }
    size_t used_bytes() const { return arena.used_bytes(slots.used()); }
    int64_t tokens_held() const { return slots.held() + (quant ? quant->tokens() : 0); }
    // The oldest non-sink position held (SlotPositions::kEmpty if none).
    int32_t oldest_recent(const Retention& retention) const;

    // Keeps position p, whose key and value rows (in the layer's dtype) are in KV memory at k and
    // v: into its slot (full precision, or a quantized layer's sinks) or the quantized tokens'
    // residual, evicting what the retention no longer keeps. The caller has the arena open.
    void store(int32_t p, const void* k, const void* v, const Retention& retention, Backend& backend);
    // store() for n positions whose rows are `stride` bytes apart at k and v; tokens that go to
    // consecutive full-precision slots are copied as one block of rows (one copy on a GPU instead
    // of one a token).
    void store_rows(const int32_t* pos, int64_t n, const uint8_t* k, const uint8_t* v, size_t stride,
                    const Retention& retention, Backend& backend);
    // Room for slot i (growing the arena and the slot positions alike).
    void make_room(int64_t slot);
    // Forgets every token and counter, and gives back the memory.
    void clear();

    KvArena arena;
    SlotPositions slots;  // of the full-precision slots (a quantized layer's: its sinks)
    std::optional<QuantizedTokens> quant;
    int32_t next_pos = 0;
    int64_t evicted = 0;

private:
    // Positions pos[0, count), whose rows are `stride` bytes apart at k and v, into the
    // full-precision slots slot_for(pos[0]) onwards, one after another.
    void into_slots(const int32_t* pos, int64_t count, const uint8_t* k, const uint8_t* v, size_t stride, Backend& backend);
};

}  // namespace kvchat
