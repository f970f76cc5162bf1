#include "engine/cache/axis_layer.h"

#include "engine/compute/attention.h"
#include "engine/cache/byte_io.h"
#include "engine/cache/offload_tier.h"
#include "engine/compute/quant_blocks.h"
#include "engine/error.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

namespace kvchat {

namespace {

constexpr uint32_t kLayerMagic = 0x5259414C;   // "LAYR": the first format
constexpr uint32_t kLayerMagic2 = 0x3259414C;  // "LAY2": slot data after a padding that page-aligns it in a file
constexpr uint32_t kLayerMagic3 = 0x3359414C;  // "LAY3": as LAY2, records in the dtype its layout names (the
                                               // earlier formats hold f32 records and a layout without dtype)
constexpr size_t kFilePage = 4096;

// Lends a layer its arena for one operation and gives it back (writing changes to the slow tier)
// even when the operation throws.
template <class Layer>
class ArenaLoan {
public:
    explicit ArenaLoan(const Layer* l, void (Layer::*begin)() const, void (Layer::*end)() const) : l_(l), end_(end) {
        (l_->*begin)();
    }
    void finish() {
        done_ = true;
        (l_->*end_)();
    }
    ~ArenaLoan() {
        if (!done_) try {
                (l_->*end_)();
            } catch (...) {
            }
    }

private:
    const Layer* l_;
    void (Layer::*end_)() const;
    bool done_ = false;
};

}  // namespace

AxisLayer::AxisLayer(const LayerSpec& spec, const LayerConfig& cfg, Backend& backend, OffloadTier* tier, int tier_index)
    : spec_(spec), cfg_(cfg), backend_(backend), tier_(cfg.offloaded ? tier : nullptr), tier_index_(tier_index),
      kv_dim_(static_cast<int64_t>(spec.shape.n_head_kv) * spec.shape.head_dim),
      slots_(cfg.nbits == 0 && cfg.retention == RetentionKind::All
                 ? SlotPositions::in_order()
                 : SlotPositions::ring(cfg.retention == RetentionKind::Sink ? cfg.sinks : 0,
                                       cfg.retention == RetentionKind::Sink ? cfg.window - cfg.sinks : cfg.window)) {
    switch (cfg_.retention) {
        case RetentionKind::All: recent_ = spec.model_window; break;
        case RetentionKind::SlidingWindow: recent_ = cfg_.window; break;
        case RetentionKind::Sink:
            recent_ = cfg_.window - cfg_.sinks;
            sink_end_ = cfg_.sinks;
            break;
    }
    if (!full()) {
        const int hd = spec.shape.head_dim;
        const int vg = std::min(cfg_.group, hd);
        if (hd % vg != 0)
            throw Error("quantized: group=" + std::to_string(cfg_.group) + " must divide the head size " +
                        std::to_string(hd) + " (or exceed it)");
        if (hd % 8 != 0) throw Error("quantized: the head size " + std::to_string(hd) + " is not a multiple of 8");
        kivi_ = KiviFormat(cfg_.nbits, cfg_.group, vg, static_cast<int>(kv_dim_));
    }
    if (full()) {
        if (cfg_.retention == RetentionKind::All)
            slot_limit_ = cfg_.fixed ? cfg_.max_len : std::numeric_limits<int32_t>::max();
        else
            slot_limit_ = cfg_.window;
        if (cfg_.fixed) slot_cap_ = slot_limit_;
    } else {
        slot_limit_ = slot_cap_ = sink_end_;
        res_cap_ = cfg_.residual + 1;
        if (cfg_.retention != RetentionKind::All)
            blk_cap_ = (recent_ + cfg_.group - 1) / cfg_.group + 2;
        else if (cfg_.fixed)
            blk_cap_ = (cfg_.max_len + cfg_.group - 1) / cfg_.group + 1;
    }
    res_off_ = static_cast<size_t>(slot_cap_) * rec_bytes();
    blk_off_ = res_off_ + static_cast<size_t>(res_cap_) * rec_bytes();
    slots_.grow(slot_cap_);
    res_pos_.resize(static_cast<size_t>(res_cap_));
    if (tier_) {
        if (cfg_.fixed) tier_->ensure(tier_index_, capacity_bytes());
    } else {
        resident_ = backend_.alloc_kv();
        resident_->resize(capacity_bytes());
    }
}

size_t AxisLayer::used_bytes() const {
    if (full()) return static_cast<size_t>(slots_.used()) * rec_bytes();
    return blk_off_ + static_cast<size_t>(blk_used_) * kivi_.block_bytes;
}

size_t AxisLayer::capacity_bytes() const {
    if (full()) return static_cast<size_t>(slot_cap_) * rec_bytes();
    return blk_off_ + static_cast<size_t>(blk_cap_) * kivi_.block_bytes;
}

void AxisLayer::begin() const {
    dirty_lo_ = std::numeric_limits<size_t>::max();
    dirty_hi_ = 0;
    base_ = tier_ ? tier_->acquire(tier_index_, used_bytes(), capacity_bytes()) : resident_->data();
}

void AxisLayer::end() const {
    if (tier_) {
        const size_t lo = dirty_lo_ < dirty_hi_ ? dirty_lo_ : 0, hi = dirty_lo_ < dirty_hi_ ? dirty_hi_ : 0;
        base_ = nullptr;
        tier_->release(tier_index_, used_bytes(), lo, hi);
    }
}

void AxisLayer::grow_slots(int64_t need) {
    if (need > slot_limit_) throw Error("cache layer " + std::to_string(spec_.index) + ": no room for slot " + std::to_string(need - 1));
    const int64_t cap = std::min<int64_t>(slot_limit_, std::max<int64_t>({need, 2 * slot_cap_, 16}));
    slot_cap_ = cap;
    slots_.grow(cap);
    res_off_ = blk_off_ = static_cast<size_t>(cap) * rec_bytes();
    if (tier_) {
        base_ = tier_->grow(tier_index_, capacity_bytes());
    } else {
        resident_->resize(capacity_bytes());
        base_ = resident_->data();
    }
}

void AxisLayer::store(int32_t p, const void* k, const void* v) {
    const size_t rb = rec_bytes(), half = rb / 2;
    if (full() || p < sink_end_) {
        const int64_t i = slots_.slot_for(p);
        if (i >= slot_cap_) grow_slots(i + 1);
        uint8_t* dst = slot(i);
        std::memcpy(dst, k, half);
        std::memcpy(dst + half, v, half);
        mark(static_cast<size_t>(i) * rb, static_cast<size_t>(i + 1) * rb);
        if (slots_.put(i, p)) ++evicted_;
    } else {
        if (res_count_ == 0) res_first_ = p;
        uint8_t* dst = res_slot(res_count_);
        std::memcpy(dst, k, half);
        std::memcpy(dst + half, v, half);
        mark(res_off_ + static_cast<size_t>(res_count_) * rb, res_off_ + static_cast<size_t>(res_count_ + 1) * rb);
        ++res_count_;
        if (recent_ > 0 && cfg_.retention != RetentionKind::All) evict_before(p + 1 - recent_);
        if (res_count_ > cfg_.residual) quantize_oldest();
    }
    next_pos_ = p + 1;
}

void AxisLayer::quantize_oldest() {
    const int G = cfg_.group;
    int32_t rec;
    if (!free_records_.empty()) {
        rec = free_records_.back();
        free_records_.pop_back();
    } else {
        if (blk_used_ == blk_cap_) {
            blk_cap_ = std::max<int64_t>(4, 2 * blk_cap_);
            if (tier_) {
                base_ = tier_->grow(tier_index_, capacity_bytes());
            } else {
                resident_->resize(capacity_bytes());
                base_ = resident_->data();
            }
        }
        rec = static_cast<int32_t>(blk_used_++);
    }
    // The block is quantized from f32 rows (the residual's, converted when it keeps another dtype).
    const float* first = reinterpret_cast<const float*>(res_slot(0));
    thread_local std::vector<float> rows;
    if (cfg_.dtype != KvDtype::F32) {
        rows.resize(static_cast<size_t>(G) * 2 * static_cast<size_t>(kv_dim_));
        backend_.kv_load(cfg_.dtype, res_slot(0), rows.data(), static_cast<int64_t>(G) * 2 * kv_dim_);
        first = rows.data();
    }
    backend_.kv_quantize(kivi_, first, first + kv_dim_, 2 * kv_dim_, G, block_data(rec));
    const size_t at = blk_off_ + static_cast<size_t>(rec) * kivi_.block_bytes;
    mark(at, at + kivi_.block_bytes);
    blocks_.push_back({res_first_, G, rec});
    const size_t rb = rec_bytes();
    std::memmove(res_slot(0), res_slot(G), static_cast<size_t>(res_count_ - G) * rb);
    mark(res_off_, res_off_ + static_cast<size_t>(res_count_ - G) * rb);
    res_first_ += G;
    res_count_ -= G;
}

void AxisLayer::evict_before(int32_t keep_from) {
    while (!blocks_.empty() && blocks_.front().first + blocks_.front().count <= keep_from) {
        evicted_ += blocks_.front().count;
        free_records_.push_back(blocks_.front().record);
        blocks_.pop_front();
    }
    if (res_count_ > 0 && res_first_ < keep_from) {
        const int64_t d = std::min<int64_t>(res_count_, keep_from - res_first_);
        const size_t rb = rec_bytes();
        std::memmove(res_slot(0), res_slot(d), static_cast<size_t>(res_count_ - d) * rb);
        mark(res_off_, res_off_ + static_cast<size_t>(res_count_ - d) * rb);
        res_first_ += static_cast<int32_t>(d);
        res_count_ -= d;
        evicted_ += d;
    }
}

size_t AxisLayer::bytes_after(int64_t first, int64_t n) const {
    if (cfg_.fixed) return capacity_bytes();
    if (full()) {
        // A slot's index never exceeds its position (see SlotPositions), and rings stop at their limit.
        const int64_t slots = std::max<int64_t>(slots_.used(), std::min<int64_t>(slot_limit_, first + n));
        return static_cast<size_t>(slots) * rec_bytes();
    }
    // Each time the residual passes `residual`, one more block.
    const int64_t over = res_count_ + n - cfg_.residual;
    const int64_t blocks = blk_used_ + (over > 0 ? (over + cfg_.group - 1) / cfg_.group : 0);
    return blk_off_ + static_cast<size_t>(blocks) * kivi_.block_bytes;
}

void AxisLayer::check_room(int64_t first, int64_t n) const {
    if (first + n > std::numeric_limits<int32_t>::max() - 1)
        throw Error("the cache cannot hold positions beyond " + std::to_string(std::numeric_limits<int32_t>::max() - 1));
    if (cfg_.retention == RetentionKind::All && cfg_.fixed && first + n > cfg_.max_len)
        throw Error("the static cache holds max_len=" + std::to_string(cfg_.max_len) + " tokens, but " +
                    std::to_string(first + n) + " are needed (" + std::to_string(first) + " held + " +
                    std::to_string(n) + " new); choose a larger max_len");
    // The disk the new tokens will take, reserved now: a full disk then stops the forward pass
    // before any layer has changed, rather than half-way through it.
    if (tier_) tier_->ensure(tier_index_, bytes_after(first, n));
}

void AxisLayer::attend(Buffer& q, const Buffer& k, const Buffer& v, const int32_t* pos, int64_t n, Buffer& out) {
    const AttentionShape& s = spec_.shape;
    check_room(pos[0], n);
    const int64_t q_dim = static_cast<int64_t>(s.n_head) * s.head_dim;
    thread_local std::vector<float> knew, qsink;
    knew.assign(k.data, k.data + n * kv_dim_);
    // Sinks are seen at their rank in the cache (StreamingLLM): a query that has filled the
    // window sits at rank window - 1, the sinks at their own positions. Recent tokens keep their
    // real positions; RoPE depends only on the distance, which ranks and positions agree on.
    const bool sink_q = sink_end_ > 0 && pos[n - 1] >= cfg_.window;
    if (sink_q) qsink.assign(q.data, q.data + n * q_dim);
    backend_.rope(spec_.rope, q.data, q_dim, pos, n, s.n_head, s.head_dim);
    backend_.rope(spec_.rope, knew.data(), kv_dim_, pos, n, s.n_head_kv, s.head_dim);
    if (sink_q) {
        thread_local std::vector<int32_t> rank;
        rank.resize(static_cast<size_t>(n));
        for (int64_t t = 0; t < n; ++t) rank[static_cast<size_t>(t)] = std::min<int32_t>(pos[t], cfg_.window - 1);
        backend_.rope(spec_.rope, qsink.data(), q_dim, rank.data(), n, s.n_head, s.head_dim);
    }

    // llama.cpp's cache is f16 and its q·k an f16 matmul: keys are stored as rounded, queries
    // rounded after scaling (so the kernel's scale becomes 1), values rounded as they are stored.
    AttentionShape shape = s;
    // (A bf16 cache cannot hold the f16 grid: it attends in f32 over its own rounding.)
    const bool f16 = s.f16_rounding && full() && cfg_.dtype != KvDtype::BF16;
    thread_local std::vector<float> vnew;
    const float* vdata = v.data;
    if (f16) {
        backend_.round_f16(knew.data(), n * kv_dim_, 1.0f);
        backend_.round_f16(q.data, n * q_dim, s.scale);
        if (sink_q) backend_.round_f16(qsink.data(), n * q_dim, s.scale);
        vnew.assign(v.data, v.data + n * kv_dim_);
        backend_.round_f16(vnew.data(), n * kv_dim_, 1.0f);
        vdata = vnew.data();
        shape.scale = 1.0f;
    }

    // The new keys and values in the layer's dtype: attention reads them beside the stored ones,
    // and they are stored as they are.
    thread_local std::vector<uint8_t> knew_s, vnew_s;
    const void* kst = knew.data();
    const void* vst = vdata;
    if (cfg_.dtype != KvDtype::F32) {
        knew_s.resize(static_cast<size_t>(n) * row_bytes());
        vnew_s.resize(static_cast<size_t>(n) * row_bytes());
        backend_.kv_store(cfg_.dtype, knew.data(), knew_s.data(), n * kv_dim_);
        backend_.kv_store(cfg_.dtype, vdata, vnew_s.data(), n * kv_dim_);
        kst = knew_s.data();
        vst = vnew_s.data();
    }

    ArenaLoan<AxisLayer> loan(this, &AxisLayer::begin, &AxisLayer::end);
    AttentionInput in;
    in.dtype = cfg_.dtype;
    in.f16_probs = f16;
    in.q = q.data;
    in.q_sink = sink_q ? qsink.data() : nullptr;
    in.qpos = pos;
    in.n_q = n;
    in.window = recent_;
    in.sink_end = sink_end_;
    const int64_t stride = 2 * kv_dim_;
    // Views end at the last slot ever written, not the allocation, so two caches with the same
    // tokens split the work the same way whatever their growth history (bit-equal results).
    const int64_t n_slots = slots_.used();
    if (n_slots > 0) in.slots.push_back({slot(0), slot(0) + row_bytes(), slots_.positions(), n_slots, stride});
    if (!full()) {
        in.kivi = &kivi_;
        for (const Block& b : blocks_) in.blocks.push_back({block_data(b.record), b.first, b.count});
        for (int64_t i = 0; i < res_count_; ++i) res_pos_[static_cast<size_t>(i)] = res_first_ + static_cast<int32_t>(i);
        if (res_count_ > 0) in.slots.push_back({res_slot(0), res_slot(0) + row_bytes(), res_pos_.data(), res_count_, stride});
    }
    in.slots.push_back({kst, vst, pos, n, kv_dim_});
    backend_.attend(in, shape, out.data);

    // Keep the new tokens. An f32 ring skips the ones this chunk would overwrite anyway.
    const int32_t keep_from = pos[n - 1] + 1 - recent_;
    const bool ring = full() && cfg_.retention != RetentionKind::All;
    for (int64_t t = 0; t < n; ++t) {
        if (ring && pos[t] >= sink_end_ && pos[t] < keep_from) {
            ++evicted_;
            continue;
        }
        store(pos[t], static_cast<const uint8_t*>(kst) + t * row_bytes(), static_cast<const uint8_t*>(vst) + t * row_bytes());
    }
    next_pos_ = pos[n - 1] + 1;
    loan.finish();
}

void AxisLayer::crop(int64_t n_tokens) {
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(n_tokens, std::numeric_limits<int32_t>::max()));
    if (n >= next_pos_) return;
    slots_.crop(n);
    if (!full()) {
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
    next_pos_ = n;
    if (tier_) tier_->set_size(tier_index_, used_bytes());
}

void AxisLayer::clear_meta() {
    slots_.clear();
    blocks_.clear();
    free_records_.clear();
    blk_used_ = 0;
    res_first_ = 0;
    res_count_ = 0;
    next_pos_ = 0;
    evicted_ = 0;
    if (tier_) tier_->set_size(tier_index_, 0);
}

void AxisLayer::reset() { clear_meta(); }

int64_t AxisLayer::tokens_held() const {
    int64_t held = slots_.held();
    for (const Block& b : blocks_) held += b.count;
    return held + res_count_;
}

int32_t AxisLayer::oldest_recent() const {
    int32_t oldest = slots_.oldest(sink_end_);
    if (!blocks_.empty()) oldest = std::min(oldest, blocks_.front().first);
    if (res_count_ > 0) oldest = std::min(oldest, res_first_);
    return oldest;
}

bool AxisLayer::can_crop_to(int64_t n) const {
    if (n >= next_pos_ || cfg_.retention == RetentionKind::All) return true;
    // A query at n sees the sinks and positions from n - recent + 1 on.
    const int64_t need_lo = std::max<int64_t>(sink_end_, n - recent_ + 1);
    if (need_lo >= n) return true;
    return oldest_recent() <= need_lo;
}

LayerTelemetry AxisLayer::telemetry() const {
    LayerTelemetry t;
    t.kind = spec_.model_window > 0 ? "sliding" : "global";
    std::string st = cfg_.fixed ? "fixed" : "growable";
    const std::string dt = kv_dtype_name(cfg_.dtype);
    st += full() ? " " + dt : " int" + std::to_string(cfg_.nbits) + " + " + dt + " residual";
    if (cfg_.retention == RetentionKind::SlidingWindow) st += ", ring of " + std::to_string(cfg_.window);
    if (cfg_.retention == RetentionKind::Sink)
        st += ", " + std::to_string(cfg_.sinks) + " sinks + ring of " + std::to_string(cfg_.window - cfg_.sinks);
    if (tier_) st += ", offloaded";
    t.storage = st;
    t.dtype = dt;
    t.tokens_held = tokens_held();
    const int64_t rb = static_cast<int64_t>(rec_bytes());
    if (full()) {
        t.capacity = slot_cap_;
        t.bytes_full_precision = t.tokens_held * rb;
    } else {
        const int64_t sinks = slots_.held();
        for (const Block& b : blocks_) t.quantized_tokens += b.count;
        t.residual_tokens = res_count_;
        t.capacity = slot_cap_ + res_cap_ + blk_cap_ * cfg_.group;
        t.bytes_full_precision = (sinks + res_count_) * rb;
        t.bytes_quantized = static_cast<int64_t>(blocks_.size()) * static_cast<int64_t>(kivi_.block_bytes);
    }
    const int64_t held_bytes = t.bytes_full_precision + t.bytes_quantized;
    (tier_ ? t.bytes_slow : t.bytes_fast) = held_bytes;
    t.bytes_reserved = static_cast<int64_t>(capacity_bytes());
    if (sink_end_ > 0) t.sink_end = std::min<int64_t>(sink_end_, next_pos_);
    const int32_t oldest = oldest_recent();
    if (oldest != kEmpty) {
        t.window_begin = oldest;
        t.window_end = next_pos_;
    }
    t.evicted = evicted_;
    if (tier_) {
        const TierTraffic& tr = tier_->traffic(tier_index_);
        t.moved_in_step = tr.in_step;
        t.moved_out_step = tr.out_step;
        t.moved_in_total = tr.in_total;
        t.moved_out_total = tr.out_total;
        t.prefetch_stall_ms = tr.stall_ms;
    }
    return t;
}

std::string AxisLayer::layout() const { return layout_core() + " " + kv_dtype_name(cfg_.dtype); }

std::string AxisLayer::layout_core() const {
    const char* ret = cfg_.retention == RetentionKind::All ? "all" : cfg_.retention == RetentionKind::SlidingWindow ? "window" : "sink";
    std::string s = "layer " + std::to_string(spec_.index) + (spec_.model_window > 0 ? " sliding " : " global ") +
                    std::to_string(spec_.shape.n_head_kv) + "x" + std::to_string(spec_.shape.head_dim) + " " + ret;
    if (cfg_.retention != RetentionKind::All) s += " window=" + std::to_string(cfg_.window);
    if (cfg_.retention == RetentionKind::Sink) s += " sinks=" + std::to_string(cfg_.sinks);
    if (cfg_.fixed) s += " max_len=" + std::to_string(cfg_.max_len);
    if (!full())
        s += " nbits=" + std::to_string(cfg_.nbits) + " group=" + std::to_string(cfg_.group) +
             " residual=" + std::to_string(cfg_.residual);
    return s;
}

void AxisLayer::save_state(std::string& out, int64_t file_offset) const {
    ArenaLoan<AxisLayer> loan(this, &AxisLayer::begin, &AxisLayer::end);
    const int64_t n_slots = slots_.used();
    // One allocation: a checkpoint is taken inside a turn's time to first token, and growing the
    // string by doubling would copy and fault in its megabytes several times.
    out.reserve(out.size() + 256 + static_cast<size_t>(n_slots) * (sizeof(int32_t) + rec_bytes()) +
                (full() ? 0 : static_cast<size_t>(res_count_) * rec_bytes() + blocks_.size() * (8 + kivi_.block_bytes)));
    const size_t begin = out.size();
    ByteWriter w(out);
    w.put<uint32_t>(kLayerMagic3);
    w.str(layout());
    w.put<int32_t>(next_pos_);
    w.put<int64_t>(evicted_);
    w.put<int64_t>(n_slots);
    w.bytes(slots_.positions(), static_cast<size_t>(n_slots) * sizeof(int32_t));
    uint32_t pad = 0;
    if (file_offset >= 0 && full() && n_slots > 0) {
        const size_t data_at = static_cast<size_t>(file_offset) + (out.size() - begin) + sizeof pad;
        pad = static_cast<uint32_t>((kFilePage - data_at % kFilePage) % kFilePage);
    }
    w.put<uint32_t>(pad);
    out.append(pad, '\0');
    for (int64_t i = 0; i < n_slots; ++i)
        if (slots_.at(i) != kEmpty) w.bytes(slot(i), rec_bytes());
    if (!full()) {
        w.put<int32_t>(res_first_);
        w.put<int64_t>(res_count_);
        if (res_count_ > 0) w.bytes(res_slot(0), static_cast<size_t>(res_count_) * rec_bytes());
        w.put<int64_t>(static_cast<int64_t>(blocks_.size()));
        for (const Block& b : blocks_) {
            w.put<int32_t>(b.first);
            w.put<int32_t>(b.count);
            w.bytes(block_data(b.record), kivi_.block_bytes);
        }
    }
    loan.finish();
}

void AxisLayer::load_state(ByteReader& r) {
    clear_meta();
    try {
        const uint32_t magic = r.get<uint32_t>("layer magic");
        if (magic != kLayerMagic && magic != kLayerMagic2 && magic != kLayerMagic3)
            r.fail("layer " + std::to_string(spec_.index) + " has a bad magic number");
        // The formats before LAY3 kept f32 records under a layout without dtype: they load into a
        // layer of any dtype, converted (exact for GGUF models, whose values lie on the f16 grid).
        const KvDtype src = magic == kLayerMagic3 ? cfg_.dtype : KvDtype::F32;
        const std::string want = magic == kLayerMagic3 ? layout() : layout_core();
        const std::string lay = r.str("layer layout", 4096);
        if (lay != want) r.fail("the snapshot's layer is '" + lay + "' but this cache's is '" + want + "'");
        const size_t src_rec = 2 * static_cast<size_t>(kv_dim_) * kv_dtype_bytes(src);
        const int32_t next = r.get<int32_t>("next position");
        const int64_t evicted = r.get<int64_t>("evicted count");
        if (next < 0 || evicted < 0) r.fail("layer " + std::to_string(spec_.index) + ": negative counts");
        const int64_t n_slots = r.get<int64_t>("slot count");
        if (n_slots < 0 || n_slots > slot_limit_ || static_cast<uint64_t>(n_slots) * sizeof(int32_t) > r.remaining())
            r.fail("layer " + std::to_string(spec_.index) + ": bad slot count " + std::to_string(n_slots));
        std::vector<int32_t> pos(static_cast<size_t>(n_slots));
        const char* pos_bytes = r.take(pos.size() * sizeof(int32_t), "slot positions");
        if (!pos.empty()) std::memcpy(pos.data(), pos_bytes, pos.size() * sizeof(int32_t));
        if (!slots_.valid(pos.data(), n_slots, next))
            r.fail("layer " + std::to_string(spec_.index) + ": its slots hold impossible positions");
        if (magic != kLayerMagic) {
            const uint32_t pad = r.get<uint32_t>("padding length");
            if (pad >= kFilePage) r.fail("layer " + std::to_string(spec_.index) + ": bad padding");
            r.take(pad, "padding");
        }
        ArenaLoan<AxisLayer> loan(this, &AxisLayer::begin, &AxisLayer::end);
        // The capacity the layer had when it was saved (it grows by doubling from 16), so the
        // first turn after a reopen does not reallocate and copy the whole layer.
        int64_t cap = 16;
        while (cap < n_slots) cap *= 2;
        cap = std::max(n_slots, std::min(cap, slot_limit_));
        // The records of the filled slots, in slot order.
        const int64_t n_records = std::count_if(pos.begin(), pos.end(), [](int32_t p) { return p != kEmpty; });
        const char* data = r.take(static_cast<size_t>(n_records) * src_rec, "slot data");
        // Every slot filled and the data page-aligned in a snapshot file: the layer maps it
        // (copy-on-write) instead of reading it, so reopening a long conversation costs no copy.
        bool mapped = false;
        const int64_t at = r.file_offset(data);
        if (n_records == n_slots && n_slots > 0 && !tier_ && full() && cap >= slot_cap_ && at >= 0 && src == cfg_.dtype) {
            const int64_t old_cap = slot_cap_;
            slot_cap_ = cap;
            mapped = resident_->adopt_file(r.file_fd(), static_cast<uint64_t>(at),
                                          static_cast<size_t>(n_slots) * rec_bytes(), capacity_bytes());
            if (mapped) {
                base_ = resident_->data();
                slots_.grow(cap);
                res_off_ = blk_off_ = static_cast<size_t>(cap) * rec_bytes();
            } else {
                slot_cap_ = old_cap;
            }
        }
        if (!mapped) {
            if (n_slots > slot_cap_) grow_slots(cap);
            for (int64_t i = 0; i < n_slots; ++i)
                if (pos[static_cast<size_t>(i)] != kEmpty) {
                    kv_convert_row(src, data, cfg_.dtype, slot(i), 2 * kv_dim_);
                    data += src_rec;
                }
        }
        slots_.assign(pos.data(), n_slots);
        if (!full()) {
            const int32_t rf = r.get<int32_t>("residual start");
            const int64_t rc = r.get<int64_t>("residual count");
            if (rf < 0 || rc < 0 || rc > cfg_.residual || rf + rc > next)
                r.fail("layer " + std::to_string(spec_.index) + ": bad residual range");
            if (rc > 0) kv_convert_row(src, r.take(static_cast<size_t>(rc) * src_rec, "residual data"), cfg_.dtype, res_slot(0), rc * 2 * kv_dim_);
            res_first_ = rf;
            res_count_ = rc;
            const int64_t nb = r.get<int64_t>("block count");
            if (nb < 0 || static_cast<uint64_t>(nb) > r.remaining() / kivi_.block_bytes)
                r.fail("layer " + std::to_string(spec_.index) + ": bad block count");
            int64_t prev_end = 0;
            for (int64_t b = 0; b < nb; ++b) {
                const int32_t first = r.get<int32_t>("block start");
                const int32_t count = r.get<int32_t>("block count");
                if (first < prev_end || count < 1 || count > cfg_.group || first + count > next ||
                    (res_count_ > 0 && first + count > res_first_))
                    r.fail("layer " + std::to_string(spec_.index) + ": block " + std::to_string(b) + " has a bad range");
                prev_end = first + count;
                if (blk_used_ == blk_cap_) {
                    blk_cap_ = std::max<int64_t>(4, 2 * blk_cap_);
                    if (tier_)
                        base_ = tier_->grow(tier_index_, capacity_bytes());
                    else {
                        resident_->resize(capacity_bytes());
                        base_ = resident_->data();
                    }
                }
                const int32_t rec = static_cast<int32_t>(blk_used_++);
                std::memcpy(block_data(rec), r.take(kivi_.block_bytes, "block data"), kivi_.block_bytes);
                blocks_.push_back({first, count, rec});
            }
        }
        next_pos_ = next;
        evicted_ = evicted;
        mark(0, used_bytes());
        loan.finish();
    } catch (...) {
        clear_meta();
        throw;
    }
}

void AxisLayer::export_tokens(TokenRows& rows) const {
    ArenaLoan<AxisLayer> loan(this, &AxisLayer::begin, &AxisLayer::end);
    rows = TokenRows{};
    rows.kv_dim = kv_dim_;
    struct Src {
        int32_t pos;
        const uint8_t* rec;  // full-precision record, or null for a quantized token
        const Block* block;
        int j;
    };
    std::vector<Src> src;
    for (int64_t i = 0; i < slots_.used(); ++i)
        if (slots_.at(i) != kEmpty) src.push_back({slots_.at(i), slot(i), nullptr, 0});
    for (const Block& b : blocks_)
        for (int j = 0; j < b.count; ++j) src.push_back({b.first + j, nullptr, &b, j});
    for (int64_t i = 0; i < res_count_; ++i) src.push_back({res_first_ + static_cast<int32_t>(i), res_slot(i), nullptr, 0});
    std::sort(src.begin(), src.end(), [](const Src& a, const Src& b) { return a.pos < b.pos; });
    rows.nbits = cfg_.nbits;
    rows.group = cfg_.group;
    rows.dtype = cfg_.dtype;
    const size_t n = src.size(), d = static_cast<size_t>(kv_dim_);
    rows.pos.resize(n);
    rows.k.resize(n * d);
    rows.v.resize(n * d);
    rows.exact.resize(n);
    for (size_t i = 0; i < n; ++i) {
        rows.pos[i] = src[i].pos;
        if (src[i].rec) {
            backend_.kv_load(cfg_.dtype, src[i].rec, rows.k.data() + i * d, kv_dim_);
            backend_.kv_load(cfg_.dtype, src[i].rec + row_bytes(), rows.v.data() + i * d, kv_dim_);
            rows.exact[i] = 1;
        } else {
            kivi_dequantize_token(kivi_, block_data(src[i].block->record), src[i].j, rows.k.data() + i * d, rows.v.data() + i * d);
            rows.exact[i] = 0;
        }
    }
    loan.finish();
}

size_t AxisLayer::import_from(const TokenRows& rows, int64_t length) const {
    // Rows past a gap in positions (a sink cache's sinks, then its recent tokens) can only be ones
    // this layer does not need; a residual, whose positions run on from its first, must not take
    // them.
    size_t from = 0;
    bool any = false;
    int32_t prev = 0;
    for (size_t i = 0; i < rows.pos.size() && rows.pos[i] < length; ++i) {
        if (rows.pos[i] < sink_end_) continue;
        if (!any || rows.pos[i] != prev + 1) from = i;
        any = true;
        prev = rows.pos[i];
    }
    return from;
}

bool AxisLayer::can_import(const TokenRows& rows, int64_t length) const {
    auto needed = [&](int64_t p) {
        if (cfg_.retention == RetentionKind::All) return true;
        return p < sink_end_ || p >= length - recent_ + 1;
    };
    // A dequantized row may only be quantized again, into blocks no finer than its own: more bits
    // or a smaller group cannot be recovered from its codes.
    const bool requantize = !full() && cfg_.nbits <= rows.nbits && cfg_.group >= rows.group;
    const bool narrower = cfg_.dtype != KvDtype::F32 && rows.dtype != cfg_.dtype;
    const size_t d = static_cast<size_t>(kv_dim_);
    // rows.pos is sorted; walk the needed positions alongside.
    size_t i = 0;
    for (int64_t p = 0; p < length; ++p) {
        if (!needed(p)) {
            if (cfg_.retention != RetentionKind::All && p >= sink_end_) p = std::max<int64_t>(p, length - recent_);
            continue;
        }
        while (i < rows.pos.size() && rows.pos[i] < p) ++i;
        if (i >= rows.pos.size() || rows.pos[i] != p) return false;
        if (!rows.exact[i] && !requantize) return false;
        // A row kept in another format must fit this layer's exactly (f32 rows of a GGUF model lie
        // on the f16 grid; bf16 and f16 hold different grids). Quantized rows are checked below.
        if (rows.exact[i] && full() && narrower &&
            !(kv_representable(cfg_.dtype, rows.k.data() + i * d, kv_dim_) &&
              kv_representable(cfg_.dtype, rows.v.data() + i * d, kv_dim_)))
            return false;
    }
    if (full()) return true;
    // Which rows import_tokens leaves in full precision (the sinks and the final residual): the
    // residual's bookkeeping of store(), without the data. Those rows must be exact.
    const size_t from = import_from(rows, length);
    int64_t rf = 0, rc = 0;
    for (size_t r = from; r < rows.pos.size() && rows.pos[r] < length; ++r) {
        const int32_t p = rows.pos[r];
        if (p < sink_end_) continue;
        if (rc == 0) rf = p;
        ++rc;
        if (recent_ > 0 && cfg_.retention != RetentionKind::All && rf < p + 1 - recent_) {
            const int64_t d = std::min<int64_t>(rc, p + 1 - recent_ - rf);
            rf += d;
            rc -= d;
        }
        if (rc > cfg_.residual) {
            rf += cfg_.group;
            rc -= cfg_.group;
        }
    }
    for (size_t r = 0; r < rows.pos.size() && rows.pos[r] < length; ++r) {
        const int32_t p = rows.pos[r];
        const bool kept_full = p < sink_end_ || (p >= rf && p < rf + rc);
        if (kept_full && !rows.exact[r]) return false;
        if (kept_full && narrower &&
            !(kv_representable(cfg_.dtype, rows.k.data() + r * d, kv_dim_) &&
              kv_representable(cfg_.dtype, rows.v.data() + r * d, kv_dim_)))
            return false;
    }
    return true;
}

void AxisLayer::import_tokens(const TokenRows& rows, int64_t length) {
    check_room(0, length);
    clear_meta();
    ArenaLoan<AxisLayer> loan(this, &AxisLayer::begin, &AxisLayer::end);
    const size_t d = static_cast<size_t>(kv_dim_);
    bool contiguous = static_cast<int64_t>(rows.pos.size()) == length;
    for (size_t i = 0; contiguous && i < rows.pos.size(); ++i) contiguous = rows.pos[i] == static_cast<int32_t>(i);
    if (!full() && cfg_.retention == RetentionKind::All && contiguous) {
        // The blocks and residual that adding the tokens one by one would leave (a block each
        // time the residual passes `residual`), quantized straight from the rows.
        const int64_t G = cfg_.group, R = cfg_.residual;
        const int64_t nb = length > R ? (length - R + G - 1) / G : 0;
        if (blk_cap_ < nb) {
            blk_cap_ = nb;
            if (tier_) {
                base_ = tier_->grow(tier_index_, capacity_bytes());
            } else {
                resident_->resize(capacity_bytes());
                base_ = resident_->data();
            }
        }
        // Blocks are quantized from the residual's rows, which hold the layer's dtype: round as it.
        std::vector<float> kr, vr;
        const float* kq = rows.k.data();
        const float* vq = rows.v.data();
        if (cfg_.dtype != KvDtype::F32 && nb > 0) {
            const int64_t m = nb * G * kv_dim_;
            std::vector<uint8_t> tmp(static_cast<size_t>(m) * kv_dtype_bytes(cfg_.dtype));
            kr.resize(static_cast<size_t>(m)), vr.resize(static_cast<size_t>(m));
            backend_.kv_store(cfg_.dtype, kq, tmp.data(), m), backend_.kv_load(cfg_.dtype, tmp.data(), kr.data(), m);
            backend_.kv_store(cfg_.dtype, vq, tmp.data(), m), backend_.kv_load(cfg_.dtype, tmp.data(), vr.data(), m);
            kq = kr.data(), vq = vr.data();
        }
        for (int64_t b = 0; b < nb; ++b) {
            const int32_t rec = static_cast<int32_t>(blk_used_++);
            backend_.kv_quantize(kivi_, kq + b * G * d, vq + b * G * d, static_cast<int64_t>(d), static_cast<int>(G),
                                block_data(rec));
            blocks_.push_back({static_cast<int32_t>(b * G), static_cast<int32_t>(G), rec});
        }
        res_first_ = static_cast<int32_t>(nb * G);
        res_count_ = length - nb * G;
        for (int64_t i = 0; i < res_count_; ++i) {
            backend_.kv_store(cfg_.dtype, rows.k.data() + (nb * G + i) * d, res_slot(i), kv_dim_);
            backend_.kv_store(cfg_.dtype, rows.v.data() + (nb * G + i) * d, res_slot(i) + row_bytes(), kv_dim_);
        }
        next_pos_ = static_cast<int32_t>(length);
        mark(0, used_bytes());
        loan.finish();
        return;
    }
    const int32_t keep_from = static_cast<int32_t>(length - recent_);
    const bool ring = full() && cfg_.retention != RetentionKind::All;
    const size_t from = import_from(rows, length);
    std::vector<uint8_t> rec(rec_bytes());
    for (size_t i = 0; i < rows.pos.size(); ++i) {
        if (rows.pos[i] >= length) break;
        if ((ring && rows.pos[i] >= sink_end_ && rows.pos[i] < keep_from) || (rows.pos[i] >= sink_end_ && i < from)) {
            ++evicted_;
            continue;
        }
        backend_.kv_store(cfg_.dtype, rows.k.data() + i * d, rec.data(), kv_dim_);
        backend_.kv_store(cfg_.dtype, rows.v.data() + i * d, rec.data() + row_bytes(), kv_dim_);
        store(rows.pos[i], rec.data(), rec.data() + row_bytes());
    }
    next_pos_ = static_cast<int32_t>(length);
    loan.finish();
}

}  // namespace kvchat
