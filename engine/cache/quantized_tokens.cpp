#include "engine/cache/quantized_tokens.h"

#include "engine/cache/byte_io.h"
#include "engine/cache/slot_positions.h"
#include "engine/compute/attention.h"

#include <algorithm>
#include <limits>
#include <string>

namespace kvchat {

QuantizedTokens::QuantizedTokens(const KiviFormat& format, int residual, KvDtype dtype)
    : kivi_(format), residual_(residual), dtype_(dtype), res_pos_(static_cast<size_t>(residual) + 1) {}

int64_t QuantizedTokens::quantized_count() const {
    int64_t n = 0;
    for (const Block& b : blocks_) n += b.count;
    return n;
}

int32_t QuantizedTokens::oldest() const {
    int32_t oldest = SlotPositions::kEmpty;
    if (!blocks_.empty()) oldest = std::min(oldest, blocks_.front().first);
    if (res_count_ > 0) oldest = std::min(oldest, res_first_);
    return oldest;
}

int64_t QuantizedTokens::append(int32_t p, const void* k, const void* v, int32_t keep_from, KvArena& arena,
                                Backend& backend) {
    const size_t rb = arena.record_bytes(), half = rb / 2;
    if (res_count_ == 0) res_first_ = p;
    uint8_t* dst = arena.residual_slot(res_count_);
    backend.kv_copy(dst, k, half);
    backend.kv_copy(dst + half, v, half);
    arena.mark(arena.residual_offset(res_count_), arena.residual_offset(res_count_ + 1));
    ++res_count_;
    int64_t evicted = 0;
    if (keep_from != std::numeric_limits<int32_t>::min()) evicted = evict_before(keep_from, arena, backend);
    if (res_count_ > residual_) quantize_oldest(arena, backend);
    return evicted;
}

int32_t QuantizedTokens::new_record(KvArena& arena) {
    if (free_records_.empty()) return arena.add_block();
    const int32_t rec = free_records_.back();
    free_records_.pop_back();
    return rec;
}

void QuantizedTokens::quantize_oldest(KvArena& arena, Backend& backend) {
    const int G = kivi_.group;
    const int32_t rec = new_record(arena);
    backend.kv_quantize(kivi_, dtype_, arena.residual_slot(0), G, arena.block(rec));
    arena.mark(arena.block_offset(rec), arena.block_offset(rec) + kivi_.block_bytes);
    blocks_.push_back({res_first_, G, rec});
    backend.kv_copy(arena.residual_slot(0), arena.residual_slot(G), static_cast<size_t>(res_count_ - G) * arena.record_bytes());
    arena.mark(arena.residual_offset(0), arena.residual_offset(res_count_ - G));
    res_first_ += G;
    res_count_ -= G;
}

int64_t QuantizedTokens::evict_before(int32_t keep_from, KvArena& arena, Backend& backend) {
    int64_t evicted = 0;
    while (!blocks_.empty() && blocks_.front().first + blocks_.front().count <= keep_from) {
        evicted += blocks_.front().count;
        free_records_.push_back(blocks_.front().record);
        blocks_.pop_front();
    }
    if (res_count_ > 0 && res_first_ < keep_from) {
        const int64_t d = std::min<int64_t>(res_count_, keep_from - res_first_);
        backend.kv_copy(arena.residual_slot(0), arena.residual_slot(d),
                        static_cast<size_t>(res_count_ - d) * arena.record_bytes());
        arena.mark(arena.residual_offset(0), arena.residual_offset(res_count_ - d));
        res_first_ += static_cast<int32_t>(d);
        res_count_ -= d;
        evicted += d;
    }
    return evicted;
}

void QuantizedTokens::crop(int32_t n) {
    while (!blocks_.empty() && blocks_.back().first >= n) {
        free_records_.push_back(blocks_.back().record);
        blocks_.pop_back();
    }
    if (!blocks_.empty()) blocks_.back().count = std::min(blocks_.back().count, n - blocks_.back().first);
    if (res_first_ >= n)
        res_count_ = 0;
    else
        res_count_ = std::min<int64_t>(res_count_, n - res_first_);
}

void QuantizedTokens::clear(KvArena& arena) {
    blocks_.clear();
    free_records_.clear();
    arena.clear_blocks();
    res_first_ = 0;
    res_count_ = 0;
}

int64_t QuantizedTokens::blocks_after(int64_t n, int64_t blocks_used) const {
    // Each time the residual passes `residual`, one more block.
    const int64_t over = res_count_ + n - residual_;
    return blocks_used + (over > 0 ? (over + kivi_.group - 1) / kivi_.group : 0);
}

void QuantizedTokens::add_views(AttentionInput& in, const KvArena& arena) {
    in.kivi = &kivi_;
    for (const Block& b : blocks_) in.blocks.push_back({arena.block(b.record), b.first, b.count});
    for (int64_t i = 0; i < res_count_; ++i) res_pos_[static_cast<size_t>(i)] = res_first_ + static_cast<int32_t>(i);
    const int64_t kv_dim = kivi_.kv_dim;
    const size_t row = arena.record_bytes() / 2;
    if (res_count_ > 0)
        in.slots.push_back({arena.residual_slot(0), arena.residual_slot(0) + row, res_pos_.data(), res_count_, 2 * kv_dim});
}

const uint8_t* QuantizedTokens::residual_record(int32_t p, const KvArena& arena) const {
    if (res_count_ == 0 || p < res_first_ || p >= res_first_ + res_count_) return nullptr;
    return arena.residual_slot(p - res_first_);
}

void QuantizedTokens::save(ByteWriter& w, const KvArena& arena, Backend& backend) const {
    w.put<int32_t>(res_first_);
    w.put<int64_t>(res_count_);
    if (res_count_ > 0) {
        const size_t n = static_cast<size_t>(res_count_) * arena.record_bytes();
        backend.kv_download(w.extend(n), arena.residual_slot(0), n);
    }
    w.put<int64_t>(static_cast<int64_t>(blocks_.size()));
    for (const Block& b : blocks_) {
        w.put<int32_t>(b.first);
        w.put<int32_t>(b.count);
        backend.kv_download(w.extend(kivi_.block_bytes), arena.block(b.record), kivi_.block_bytes);
    }
}

void QuantizedTokens::load(ByteReader& r, KvDtype src, int32_t next, int layer_index, KvArena& arena, Backend& backend) {
    const std::string layer = "layer " + std::to_string(layer_index);
    const int64_t values = 2 * static_cast<int64_t>(kivi_.kv_dim);  // per record
    const size_t src_rec = static_cast<size_t>(values) * kv_dtype_bytes(src);
    const int32_t rf = r.get<int32_t>("residual start");
    const int64_t rc = r.get<int64_t>("residual count");
    if (rf < 0 || rc < 0 || rc > residual_ || rf + rc > next) r.fail(layer + ": bad residual range");
    if (rc > 0) {
        const char* data = r.take(static_cast<size_t>(rc) * src_rec, "residual data");
        const size_t n = static_cast<size_t>(rc) * arena.record_bytes();
        if (src == dtype_) {
            backend.kv_upload(arena.residual_slot(0), data, n);
        } else {
            std::vector<uint8_t> rows(n);
            kv_convert_row(src, data, dtype_, rows.data(), rc * values);
            backend.kv_upload(arena.residual_slot(0), rows.data(), n);
        }
    }
    res_first_ = rf;
    res_count_ = rc;
    const int64_t nb = r.get<int64_t>("block count");
    if (nb < 0 || static_cast<uint64_t>(nb) > r.remaining() / kivi_.block_bytes) r.fail(layer + ": bad block count");
    int64_t prev_end = 0;
    for (int64_t b = 0; b < nb; ++b) {
        const int32_t first = r.get<int32_t>("block start");
        const int32_t count = r.get<int32_t>("block count");
        if (first < prev_end || count < 1 || count > kivi_.group || first + count > next ||
            (res_count_ > 0 && first + count > res_first_))
            r.fail(layer + ": block " + std::to_string(b) + " has a bad range");
        prev_end = first + count;
        const int32_t rec = arena.add_block();
        backend.kv_upload(arena.block(rec), r.take(kivi_.block_bytes, "block data"), kivi_.block_bytes);
        blocks_.push_back({first, count, rec});
    }
}

void QuantizedTokens::import_contiguous(int64_t length, const RecordSource& records, KvArena& arena, Backend& backend) {
    const int64_t G = kivi_.group, R = residual_;
    const size_t rb = arena.record_bytes();
    const int64_t nb = length > R ? (length - R + G - 1) / G : 0;
    arena.reserve_blocks(nb);
    // The blocks' records in the residual's dtype, staged in KV memory a few blocks at a time (one
    // upload each), are quantized as the append quantizes the residual: the same values (rounded
    // to the dtype first) give the same codes.
    const int64_t per_stage = std::max<int64_t>(1, 256 / G);
    std::vector<uint8_t> host(static_cast<size_t>(std::min(nb, per_stage) * G) * rb);
    std::unique_ptr<KvMemory> staged;
    if (nb > 0) {
        staged = backend.alloc_kv();
        staged->resize(host.size());
    }
    for (int64_t b0 = 0; b0 < nb; b0 += per_stage) {
        const int64_t m = std::min(per_stage, nb - b0);
        records(b0 * G, m * G, host.data());
        backend.kv_upload(staged->data(), host.data(), static_cast<size_t>(m * G) * rb);
        for (int64_t b = 0; b < m; ++b) {
            const int32_t rec = arena.add_block();
            backend.kv_quantize(kivi_, dtype_, staged->data() + static_cast<size_t>(b * G) * rb, static_cast<int>(G),
                                arena.block(rec));
            blocks_.push_back({static_cast<int32_t>((b0 + b) * G), static_cast<int32_t>(G), rec});
        }
    }
    res_first_ = static_cast<int32_t>(nb * G);
    res_count_ = length - nb * G;
    if (res_count_ > 0) {
        host.resize(static_cast<size_t>(res_count_) * rb);
        records(nb * G, res_count_, host.data());
        backend.kv_upload(arena.residual_slot(0), host.data(), host.size());
    }
}

}  // namespace kvchat
