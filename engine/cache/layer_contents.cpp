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
        into_slots(&p, 1, static_cast<const uint8_t*>(k), static_cast<const uint8_t*>(v), 0, backend);  // one row: no pitch
        return;
    }
    const int32_t keep_from = retention.recent() > 0 && !retention.keeps_all() ? p + 1 - retention.recent()
                                                                                : std::numeric_limits<int32_t>::min();
    evicted += quant->append(p, k, v, keep_from, arena, backend);
    next_pos = p + 1;
}

void LayerContents::store_rows(const int32_t* pos, int64_t n, const uint8_t* k, const uint8_t* v, size_t stride,
                               const Retention& retention, Backend& backend) {
    int64_t t = 0;
    while (t < n) {
        if (!(full() || pos[t] < retention.sink_end())) {
            store(pos[t], k + size_t(t) * stride, v + size_t(t) * stride, retention, backend);
            ++t;
            continue;
        }
        // The run of tokens from t that go to slots first, first + 1, ... (a layer keeping every
        // token: all of them; a ring: up to its end).
        const int64_t first = slots.slot_for(pos[t]);
        int64_t e = t + 1;
        while (e < n && (full() || pos[e] < retention.sink_end()) &&
               (slots.ordered() || slots.slot_for(pos[e]) == first + (e - t)))
            ++e;
        into_slots(pos + t, e - t, k + size_t(t) * stride, v + size_t(t) * stride, stride, backend);
        t = e;
    }
}

void LayerContents::into_slots(const int32_t* pos, int64_t count, const uint8_t* k, const uint8_t* v, size_t stride,
                               Backend& backend) {
    const int64_t first = slots.slot_for(pos[0]);
    make_room(first + count - 1);
    const size_t half = record_bytes() / 2;
    uint8_t* dst = arena.slot(first);
    backend.kv_copy_rows(dst, record_bytes(), k, stride, half, count);
    backend.kv_copy_rows(dst + half, record_bytes(), v, stride, half, count);
    arena.mark(arena.slot_offset(first), arena.slot_offset(first + count));
    for (int64_t i = 0; i < count; ++i)
        if (slots.put(first + i, pos[i])) ++evicted;
    next_pos = pos[count - 1] + 1;
}

void LayerContents::clear() {
    slots.clear();
    if (quant) quant->clear(arena);
    next_pos = 0;
    evicted = 0;
    arena.memory().shrink(0);
}

}  // namespace kvchat
