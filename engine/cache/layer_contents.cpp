#include "engine/cache/layer_contents.h"

#include <algorithm>
#include <limits>

namespace kvchat {

LayerContents::LayerContents(KvArena arena_, SlotPositions slots_, std::optional<QuantizedTokens> quant_)
    : arena(std::move(arena_)), slots(std::move(slots_)), quant(std::move(quant_)) {
    slots.grow(arena.slot_capacity());
}

int32_t LayerContents::oldest_recent(const Retention& retention) const {
    int32_t oldest = slots.oldest(retention.sink_end());
    if (quant) oldest = std::min(oldest, quant->oldest());
    return oldest;
}

void LayerContents::make_room(int64_t slot) {
    if (slot < arena.slot_capacity()) return;
    arena.grow_slots(slot + 1);
    slots.grow(arena.slot_capacity());
}

void LayerContents::store(int32_t p, const void* k, const void* v, const Retention& retention, Backend& backend) {
    if (full() || p < retention.sink_end()) {
        const int64_t i = slots.slot_for(p);
        make_room(i);
        const size_t half = record_bytes() / 2;
        uint8_t* dst = arena.slot(i);
        backend.kv_copy(dst, k, half);
        backend.kv_copy(dst + half, v, half);
        arena.mark(arena.slot_offset(i), arena.slot_offset(i + 1));
        if (slots.put(i, p)) ++evicted;
    } else {
        const int32_t keep_from = retention.recent() > 0 && !retention.keeps_all() ? p + 1 - retention.recent()
                                                                                    : std::numeric_limits<int32_t>::min();
        evicted += quant->append(p, k, v, keep_from, arena, backend);
    }
    next_pos = p + 1;
}

void LayerContents::clear() {
    slots.clear();
    if (quant) quant->clear(arena);
    next_pos = 0;
    evicted = 0;
    arena.memory().shrink(0);
}

}  // namespace kvchat
