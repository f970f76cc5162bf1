#include "engine/cache/axis_layer.h"

#include "engine/compute/attention.h"
#include "engine/cache/byte_io.h"
#include "engine/cache/offload_tier.h"
#include "engine/cache/offloaded_memory.h"
#include "engine/cache/resident_memory.h"
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

// The quantized format of a layer (checked against its head size), if it quantizes.
std::optional<KiviFormat> kivi_format(const LayerSpec& spec, const LayerConfig& cfg) {
    if (cfg.nbits == 0) return std::nullopt;
    const int hd = spec.shape.head_dim;
    const int vg = std::min(cfg.group, hd);
    if (hd % vg != 0)
        throw Error("quantized: group=" + std::to_string(cfg.group) + " must divide the head size " + std::to_string(hd) +
                    " (or exceed it)");
    if (hd % 8 != 0) throw Error("quantized: the head size " + std::to_string(hd) + " is not a multiple of 8");
    return KiviFormat(cfg.nbits, cfg.group, vg, spec.shape.n_head_kv * hd);
}

// The arena's first regions: full-precision slots (and their limit), residual and blocks.
struct Regions {
    int64_t slots = 0, limit = 0, residual = 0, blocks = 0;
    size_t block_bytes = 0;
};

Regions regions(const LayerConfig& cfg, const Retention& ret, const std::optional<KiviFormat>& kivi) {
    Regions r;
    if (!kivi) {
        if (ret.keeps_all())
            r.limit = cfg.fixed ? cfg.max_len : std::numeric_limits<int32_t>::max();
        else
            r.limit = cfg.window;
        if (cfg.fixed) r.slots = r.limit;
    } else {
        r.limit = r.slots = ret.sink_end();
        r.residual = cfg.residual + 1;
        if (!ret.keeps_all())
            r.blocks = (ret.recent() + cfg.group - 1) / cfg.group + 2;
        else if (cfg.fixed)
            r.blocks = (cfg.max_len + cfg.group - 1) / cfg.group + 1;
        r.block_bytes = kivi->block_bytes;
    }
    return r;
}

std::unique_ptr<LayerMemory> layer_memory(const LayerConfig& cfg, Backend& backend, OffloadTier* tier, int index) {
    if (cfg.offloaded && tier) return std::make_unique<OffloadedMemory>(*tier, index);
    return std::make_unique<ResidentMemory>(backend);
}

KvArena make_arena(LayerMemory& memory, const LayerSpec& spec, const LayerConfig& cfg, const Retention& ret,
                   const std::optional<KiviFormat>& kivi) {
    const Regions r = regions(cfg, ret, kivi);
    const size_t rec = 2 * static_cast<size_t>(spec.shape.n_head_kv) * spec.shape.head_dim * kv_dtype_bytes(cfg.dtype);
    return KvArena(memory, spec.index, rec, r.block_bytes, r.slots, r.limit, r.residual, r.blocks, cfg.fixed);
}

// Activation rows of the layer's own, given back to the backend however attend() ends.
class ScratchRows {
public:
    explicit ScratchRows(Backend& backend) : backend_(backend) {}
    ~ScratchRows() { backend_.free(rows); }
    ScratchRows(const ScratchRows&) = delete;
    ScratchRows& operator=(const ScratchRows&) = delete;
    // A copy of rows [0, n) of src.
    Buffer& copy_of(const Buffer& src, int64_t n) {
        rows = backend_.alloc(n, src.cols);
        backend_.copy(src, n, rows);
        return rows;
    }
    Buffer rows;

private:
    Backend& backend_;
};

}  // namespace

AxisLayer::AxisLayer(const LayerSpec& spec, const LayerConfig& cfg, Backend& backend, OffloadTier* tier, int tier_index)
    : AxisLayer(spec, cfg, backend, tier, tier_index, kivi_format(spec, cfg)) {}

AxisLayer::AxisLayer(const LayerSpec& spec, const LayerConfig& cfg, Backend& backend, OffloadTier* tier, int tier_index,
                     const std::optional<KiviFormat>& kivi)
    : spec_(spec), cfg_(cfg), backend_(backend), kv_dim_(static_cast<int64_t>(spec.shape.n_head_kv) * spec.shape.head_dim),
      retention_(cfg.retention, cfg.window, cfg.sinks, spec.model_window),
      memory_(layer_memory(cfg, backend, tier, tier_index)),
      arena_(make_arena(*memory_, spec, cfg, retention_, kivi)),
      slots_(retention_.slot_positions(kivi.has_value())),
      staged_(backend.alloc_kv()) {
    if (kivi) quant_.emplace(*kivi, cfg.residual, cfg.dtype);
    slots_.grow(arena_.slot_capacity());
}

size_t AxisLayer::bytes_after(int64_t first, int64_t n) const {
    if (cfg_.fixed) return arena_.capacity_bytes();
    if (full()) {
        // A slot's index never exceeds its position (see SlotPositions), and rings stop at their limit.
        const int64_t slots = std::max<int64_t>(slots_.used(), std::min<int64_t>(arena_.slot_limit(), first + n));
        return arena_.bytes_with(slots, 0);
    }
    return arena_.bytes_with(0, quant_->blocks_after(n, arena_.blocks_used()));
}

void AxisLayer::check_room(int64_t first, int64_t n) const {
    if (first + n > std::numeric_limits<int32_t>::max() - 1)
        throw Error("the cache cannot hold positions beyond " + std::to_string(std::numeric_limits<int32_t>::max() - 1));
    if (retention_.keeps_all() && cfg_.fixed && first + n > cfg_.max_len)
        throw Error("the static cache holds max_len=" + std::to_string(cfg_.max_len) + " tokens, but " +
                    std::to_string(first + n) + " are needed (" + std::to_string(first) + " held + " +
                    std::to_string(n) + " new); choose a larger max_len");
    // The disk the new tokens will take, reserved now: a full disk then stops the forward pass
    // before any layer has changed, rather than half-way through it.
    if (memory_->offloaded()) memory_->reserve(bytes_after(first, n));
}

void AxisLayer::store(int32_t p, const void* k, const void* v) {
    if (full() || p < retention_.sink_end()) {
        const int64_t i = slots_.slot_for(p);
        if (i >= arena_.slot_capacity()) {
            arena_.grow_slots(i + 1);
            slots_.grow(arena_.slot_capacity());
        }
        const size_t half = row_bytes();
        uint8_t* dst = arena_.slot(i);
        backend_.kv_copy(dst, k, half);
        backend_.kv_copy(dst + half, v, half);
        arena_.mark(arena_.slot_offset(i), arena_.slot_offset(i + 1));
        if (slots_.put(i, p)) ++evicted_;
    } else {
        const int32_t keep_from = retention_.recent() > 0 && !retention_.keeps_all() ? p + 1 - retention_.recent()
                                                                                      : std::numeric_limits<int32_t>::min();
        evicted_ += quant_->append(p, k, v, keep_from, arena_, backend_);
    }
    next_pos_ = p + 1;
}

void AxisLayer::attend(Buffer& q, const Buffer& k, const Buffer& v, const int32_t* pos, int64_t n, Buffer& out,
                       const std::atomic<bool>* cancel) {
    const AttentionShape& s = spec_.shape;
    check_room(pos[0], n);
    // The new keys (and values, when rounded) are changed on copies: k and v belong to the model.
    ScratchRows knew_rows(backend_), vnew_rows(backend_), qsink_rows(backend_);
    Buffer& knew = knew_rows.copy_of(k, n);
    Buffer& qsink = qsink_rows.rows;
    // Sinks are seen at their rank in the cache (StreamingLLM): a query that has filled the
    // window sits at rank window - 1, the sinks at their own positions. Recent tokens keep their
    // real positions; RoPE depends only on the distance, which ranks and positions agree on.
    const bool sink_q = retention_.ranks_queries(pos[n - 1]);
    if (sink_q) qsink_rows.copy_of(q, n);
    backend_.rope(spec_.rope, q, pos, n, s.n_head, s.head_dim);
    backend_.rope(spec_.rope, knew, pos, n, s.n_head_kv, s.head_dim);
    if (sink_q) {
        thread_local std::vector<int32_t> rank;
        rank.resize(static_cast<size_t>(n));
        for (int64_t t = 0; t < n; ++t) rank[static_cast<size_t>(t)] = retention_.rank(pos[t]);
        backend_.rope(spec_.rope, qsink, rank.data(), n, s.n_head, s.head_dim);
    }

    // llama.cpp's cache is f16 and its q·k an f16 matmul: keys are stored as rounded, queries
    // rounded after scaling (so the kernel's scale becomes 1), values rounded as they are stored.
    AttentionShape shape = s;
    // (A bf16 cache cannot hold the f16 grid: it attends in f32 over its own rounding.)
    const bool f16 = s.f16_rounding && full() && cfg_.dtype != KvDtype::BF16;
    const Buffer* vsrc = &v;
    if (f16) {
        backend_.round_f16(knew, n, 1.0f);
        backend_.round_f16(q, n, s.scale);
        if (sink_q) backend_.round_f16(qsink, n, s.scale);
        Buffer& vnew = vnew_rows.copy_of(v, n);
        backend_.round_f16(vnew, n, 1.0f);
        vsrc = &vnew;
        shape.scale = 1.0f;
    }

    // The new keys and values in the layer's dtype: attention reads them beside the stored ones,
    // and they are stored as they are.
    const size_t rows = static_cast<size_t>(n) * row_bytes();
    if (staged_bytes_ < 2 * rows) {
        staged_->resize(2 * rows);
        staged_bytes_ = 2 * rows;
    }
    uint8_t* kst = staged_->data();
    uint8_t* vst = kst + rows;
    backend_.kv_store(cfg_.dtype, knew, n, kst);
    backend_.kv_store(cfg_.dtype, *vsrc, n, vst);

    KvArena::Use use(arena_, slots_);
    AttentionInput in;
    in.dtype = cfg_.dtype;
    in.f16_probs = f16;
    in.q = q.data;
    in.q_sink = sink_q ? qsink.data : nullptr;
    in.qpos = pos;
    in.n_q = n;
    in.window = retention_.recent();
    in.sink_end = retention_.sink_end();
    in.cancel = cancel;
    const int64_t stride = 2 * kv_dim_;
    // Views end at the last slot ever written, not the allocation, so two caches with the same
    // tokens split the work the same way whatever their growth history (bit-equal results).
    const int64_t n_slots = slots_.used();
    if (n_slots > 0) in.slots.push_back({arena_.slot(0), arena_.slot(0) + row_bytes(), slots_.positions(), n_slots, stride});
    if (quant_) quant_->add_views(in, arena_);
    in.slots.push_back({kst, vst, pos, n, kv_dim_});
    backend_.attend(in, shape, out.data);
    // Stopped part-way, `out` is incomplete: nothing of the chunk is kept.
    if (cancel && cancel->load(std::memory_order_relaxed)) throw Cancelled("Prefilling was cancelled");

    // Keep the new tokens. A full-precision ring skips the ones this chunk would overwrite anyway.
    const bool ring = full() && !retention_.keeps_all();
    for (int64_t t = 0; t < n; ++t) {
        if (ring && retention_.skips(pos[t], pos[n - 1])) {
            ++evicted_;
            continue;
        }
        store(pos[t], kst + t * row_bytes(), vst + t * row_bytes());
    }
    next_pos_ = pos[n - 1] + 1;
    use.finish();
}

void AxisLayer::crop(int64_t n_tokens) {
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(n_tokens, std::numeric_limits<int32_t>::max()));
    if (n >= next_pos_) return;
    slots_.crop(n);
    if (quant_) quant_->crop(n);
    next_pos_ = n;
    memory_->shrink(used_bytes());
}

void AxisLayer::clear_meta() {
    slots_.clear();
    if (quant_) quant_->clear(arena_);
    next_pos_ = 0;
    evicted_ = 0;
    memory_->shrink(0);
}

void AxisLayer::reset() { clear_meta(); }

int64_t AxisLayer::tokens_held() const { return slots_.held() + (quant_ ? quant_->tokens() : 0); }

int32_t AxisLayer::oldest_recent() const {
    int32_t oldest = slots_.oldest(retention_.sink_end());
    if (quant_) oldest = std::min(oldest, quant_->oldest());
    return oldest;
}

bool AxisLayer::can_crop_to(int64_t n) const { return retention_.can_crop_to(n, next_pos_, oldest_recent()); }

LayerTelemetry AxisLayer::telemetry() const {
    LayerTelemetry t;
    t.kind = spec_.model_window > 0 ? "sliding" : "global";
    std::string st = cfg_.fixed ? "fixed" : "growable";
    const std::string dt = kv_dtype_name(cfg_.dtype);
    st += full() ? " " + dt : " int" + std::to_string(cfg_.nbits) + " + " + dt + " residual";
    st += retention_.describe();
    if (memory_->offloaded()) st += ", offloaded";
    t.storage = st;
    t.dtype = dt;
    t.tokens_held = tokens_held();
    const int64_t rb = static_cast<int64_t>(rec_bytes());
    if (full()) {
        t.capacity = arena_.slot_capacity();
        t.bytes_full_precision = t.tokens_held * rb;
    } else {
        const int64_t sinks = slots_.held();
        t.quantized_tokens = quant_->quantized_count();
        t.residual_tokens = quant_->residual_count();
        t.capacity = arena_.slot_capacity() + arena_.residual_capacity() + arena_.block_capacity() * cfg_.group;
        t.bytes_full_precision = (sinks + quant_->residual_count()) * rb;
        t.bytes_quantized = static_cast<int64_t>(quant_->blocks().size()) * static_cast<int64_t>(quant_->format().block_bytes);
    }
    const int64_t held_bytes = t.bytes_full_precision + t.bytes_quantized;
    (memory_->offloaded() ? t.bytes_slow : t.bytes_fast) = held_bytes;
    t.bytes_reserved = static_cast<int64_t>(arena_.capacity_bytes());
    const int sink_end = retention_.sink_end();
    if (sink_end > 0) t.sink_end = std::min<int64_t>(sink_end, next_pos_);
    const int32_t oldest = oldest_recent();
    if (oldest != kEmpty) {
        t.window_begin = oldest;
        t.window_end = next_pos_;
    }
    t.evicted = evicted_;
    if (const TierTraffic* tr = memory_->traffic()) {
        t.moved_in_step = tr->in_step;
        t.moved_out_step = tr->out_step;
        t.moved_in_total = tr->in_total;
        t.moved_out_total = tr->out_total;
        t.prefetch_stall_ms = tr->stall_ms;
    }
    return t;
}

std::string AxisLayer::layout() const { return layout_core() + " " + kv_dtype_name(cfg_.dtype); }

std::string AxisLayer::layout_core() const {
    std::string s = "layer " + std::to_string(spec_.index) + (spec_.model_window > 0 ? " sliding " : " global ") +
                    std::to_string(spec_.shape.n_head_kv) + "x" + std::to_string(spec_.shape.head_dim) + " " +
                    retention_.layout();
    if (cfg_.fixed) s += " max_len=" + std::to_string(cfg_.max_len);
    if (!full())
        s += " nbits=" + std::to_string(cfg_.nbits) + " group=" + std::to_string(cfg_.group) +
             " residual=" + std::to_string(cfg_.residual);
    return s;
}

void AxisLayer::save_state(std::string& out, int64_t file_offset) const {
    KvArena::Use use(arena_, slots_);
    const int64_t n_slots = slots_.used();
    const size_t rb = rec_bytes();
    // One allocation: a checkpoint is taken inside a turn's time to first token, and growing the
    // string by doubling would copy and fault in its megabytes several times.
    out.reserve(out.size() + 256 + static_cast<size_t>(n_slots) * (sizeof(int32_t) + rb) +
                (full() ? 0
                        : static_cast<size_t>(quant_->residual_count()) * rb +
                              quant_->blocks().size() * (8 + quant_->format().block_bytes)));
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
    // The filled slots' records, in runs of consecutive filled slots.
    for (int64_t i = 0; i < n_slots;) {
        if (slots_.at(i) == kEmpty) {
            ++i;
            continue;
        }
        int64_t j = i + 1;
        while (j < n_slots && slots_.at(j) != kEmpty) ++j;
        const size_t n = static_cast<size_t>(j - i) * rb;
        backend_.kv_download(w.extend(n), arena_.slot(i), n);
        i = j;
    }
    if (quant_) quant_->save(w, arena_, backend_);
    use.finish();
}

void AxisLayer::load_state(ByteReader& r) {
    clear_meta();
    try {
        const std::string layer = "layer " + std::to_string(spec_.index);
        const uint32_t magic = r.get<uint32_t>("layer magic");
        if (magic != kLayerMagic && magic != kLayerMagic2 && magic != kLayerMagic3) r.fail(layer + " has a bad magic number");
        // The formats before LAY3 kept f32 records under a layout without dtype: they load into a
        // layer of any dtype, converted (exact for GGUF models, whose values lie on the f16 grid).
        const KvDtype src = magic == kLayerMagic3 ? cfg_.dtype : KvDtype::F32;
        const std::string want = magic == kLayerMagic3 ? layout() : layout_core();
        const std::string lay = r.str("layer layout", 4096);
        if (lay != want) r.fail("the snapshot's layer is '" + lay + "' but this cache's is '" + want + "'");
        const size_t src_rec = 2 * static_cast<size_t>(kv_dim_) * kv_dtype_bytes(src);
        const int32_t next = r.get<int32_t>("next position");
        const int64_t evicted = r.get<int64_t>("evicted count");
        if (next < 0 || evicted < 0) r.fail(layer + ": negative counts");
        const int64_t n_slots = r.get<int64_t>("slot count");
        if (n_slots < 0 || n_slots > arena_.slot_limit() ||
            static_cast<uint64_t>(n_slots) * sizeof(int32_t) > r.remaining())
            r.fail(layer + ": bad slot count " + std::to_string(n_slots));
        std::vector<int32_t> pos(static_cast<size_t>(n_slots));
        const char* pos_bytes = r.take(pos.size() * sizeof(int32_t), "slot positions");
        if (!pos.empty()) std::memcpy(pos.data(), pos_bytes, pos.size() * sizeof(int32_t));
        if (!slots_.valid(pos.data(), n_slots, next)) r.fail(layer + ": its slots hold impossible positions");
        if (magic != kLayerMagic) {
            const uint32_t pad = r.get<uint32_t>("padding length");
            if (pad >= kFilePage) r.fail(layer + ": bad padding");
            r.take(pad, "padding");
        }
        KvArena::Use use(arena_, slots_);
        // The capacity the layer had when it was saved (it grows by doubling from 16), so the
        // first turn after a reopen does not reallocate and copy the whole layer.
        int64_t cap = 16;
        while (cap < n_slots) cap *= 2;
        cap = std::max(n_slots, std::min(cap, arena_.slot_limit()));
        // The records of the filled slots, in slot order.
        const int64_t n_records = std::count_if(pos.begin(), pos.end(), [](int32_t p) { return p != kEmpty; });
        const char* data = r.take(static_cast<size_t>(n_records) * src_rec, "slot data");
        // Every slot filled and the data page-aligned in a snapshot file: the layer maps it
        // (copy-on-write) instead of reading it, so reopening a long conversation costs no copy.
        bool mapped = false;
        const int64_t at = r.file_offset(data);
        if (n_records == n_slots && n_slots > 0 && !memory_->offloaded() && full() && cap >= arena_.slot_capacity() &&
            at >= 0 && src == cfg_.dtype) {
            mapped = arena_.adopt_slots(r.file_fd(), static_cast<uint64_t>(at), n_slots, cap);
            if (mapped) slots_.grow(cap);
        }
        if (!mapped) {
            if (n_slots > arena_.slot_capacity()) {
                arena_.grow_slots(cap);
                slots_.grow(arena_.slot_capacity());
            }
            const size_t rb = rec_bytes();
            std::vector<uint8_t> rec(src == cfg_.dtype ? 0 : rb);
            for (int64_t i = 0; i < n_slots; ++i)
                if (pos[static_cast<size_t>(i)] != kEmpty) {
                    if (src == cfg_.dtype) {
                        backend_.kv_upload(arena_.slot(i), data, rb);
                    } else {
                        kv_convert_row(src, data, cfg_.dtype, rec.data(), 2 * kv_dim_);
                        backend_.kv_upload(arena_.slot(i), rec.data(), rb);
                    }
                    data += src_rec;
                }
        }
        slots_.assign(pos.data(), n_slots);
        if (quant_) quant_->load(r, src, next, spec_.index, arena_, backend_);
        next_pos_ = next;
        evicted_ = evicted;
        arena_.mark(0, used_bytes());
        use.finish();
    } catch (...) {
        clear_meta();
        throw;
    }
}

void AxisLayer::export_tokens(TokenRows& rows) const {
    KvArena::Use use(arena_, slots_);
    rows = TokenRows{};
    rows.kv_dim = kv_dim_;
    // The layer's bytes in host memory, read at the same offsets.
    const size_t used = used_bytes();
    std::vector<uint8_t> host(used);
    if (used) backend_.kv_download(host.data(), arena_.slot(0), used);
    auto on_host = [&](const uint8_t* p) { return host.data() + (p - arena_.slot(0)); };
    struct Src {
        int32_t pos;
        const uint8_t* rec;  // full-precision record (host), or null for a quantized token
        const uint8_t* block;
        int j;
    };
    std::vector<Src> src;
    for (int64_t i = 0; i < slots_.used(); ++i)
        if (slots_.at(i) != kEmpty) src.push_back({slots_.at(i), on_host(arena_.slot(i)), nullptr, 0});
    if (quant_) {
        for (const QuantizedTokens::Block& b : quant_->blocks())
            for (int j = 0; j < b.count; ++j) src.push_back({b.first + j, nullptr, on_host(arena_.block(b.record)), j});
        for (int64_t i = 0; i < quant_->residual_count(); ++i) {
            const int32_t p = quant_->residual_first() + static_cast<int32_t>(i);
            src.push_back({p, on_host(quant_->residual_record(p, arena_)), nullptr, 0});
        }
    }
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
            kv_load_row(cfg_.dtype, src[i].rec, rows.k.data() + i * d, kv_dim_);
            kv_load_row(cfg_.dtype, src[i].rec + row_bytes(), rows.v.data() + i * d, kv_dim_);
            rows.exact[i] = 1;
        } else {
            kivi_dequantize_token(quant_->format(), src[i].block, src[i].j, rows.k.data() + i * d, rows.v.data() + i * d);
            rows.exact[i] = 0;
        }
    }
    use.finish();
}

size_t AxisLayer::import_from(const TokenRows& rows, int64_t length) const {
    // Rows past a gap in positions (a sink cache's sinks, then its recent tokens) can only be ones
    // this layer does not need; a residual, whose positions run on from its first, must not take
    // them.
    size_t from = 0;
    bool any = false;
    int32_t prev = 0;
    for (size_t i = 0; i < rows.pos.size() && rows.pos[i] < length; ++i) {
        if (rows.pos[i] < retention_.sink_end()) continue;
        if (!any || rows.pos[i] != prev + 1) from = i;
        any = true;
        prev = rows.pos[i];
    }
    return from;
}

bool AxisLayer::can_import(const TokenRows& rows, int64_t length) const {
    const int sink_end = retention_.sink_end(), recent = retention_.recent();
    // A dequantized row may only be quantized again, into blocks no finer than its own: more bits
    // or a smaller group cannot be recovered from its codes.
    const bool requantize = !full() && cfg_.nbits <= rows.nbits && cfg_.group >= rows.group;
    const bool narrower = cfg_.dtype != KvDtype::F32 && rows.dtype != cfg_.dtype;
    const size_t d = static_cast<size_t>(kv_dim_);
    // rows.pos is sorted; walk the needed positions alongside.
    size_t i = 0;
    for (int64_t p = 0; p < length; ++p) {
        if (!retention_.needed(p, length)) {
            if (!retention_.keeps_all() && p >= sink_end) p = std::max<int64_t>(p, length - recent);
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
        if (p < sink_end) continue;
        if (rc == 0) rf = p;
        ++rc;
        if (recent > 0 && !retention_.keeps_all() && rf < p + 1 - recent) {
            const int64_t d = std::min<int64_t>(rc, p + 1 - recent - rf);
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
        const bool kept_full = p < sink_end || (p >= rf && p < rf + rc);
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
    KvArena::Use use(arena_, slots_);
    const size_t d = static_cast<size_t>(kv_dim_);
    bool contiguous = static_cast<int64_t>(rows.pos.size()) == length;
    for (size_t i = 0; contiguous && i < rows.pos.size(); ++i) contiguous = rows.pos[i] == static_cast<int32_t>(i);
    if (!full() && retention_.keeps_all() && contiguous) {
        // The blocks and residual that adding the tokens one by one would leave (a block each
        // time the residual passes `residual`), quantized straight from the rows.
        quant_->import_contiguous(rows.k.data(), rows.v.data(), length, arena_, backend_);
        next_pos_ = static_cast<int32_t>(length);
        arena_.mark(0, used_bytes());
        use.finish();
        return;
    }
    const int32_t last = static_cast<int32_t>(length - 1);
    const bool ring = full() && !retention_.keeps_all();
    const size_t from = import_from(rows, length);
    // Each row goes through the append's path: converted on the host, then into KV memory.
    const size_t rb = rec_bytes();
    std::vector<uint8_t> rec(rb);
    if (staged_bytes_ < rb) {
        staged_->resize(rb);
        staged_bytes_ = rb;
    }
    for (size_t i = 0; i < rows.pos.size(); ++i) {
        const int32_t p = rows.pos[i];
        if (p >= length) break;
        if ((ring && retention_.skips(p, last)) || (p >= retention_.sink_end() && i < from)) {
            ++evicted_;
            continue;
        }
        kv_store_row(cfg_.dtype, rows.k.data() + i * d, rec.data(), kv_dim_);
        kv_store_row(cfg_.dtype, rows.v.data() + i * d, rec.data() + row_bytes(), kv_dim_);
        backend_.kv_upload(staged_->data(), rec.data(), rb);
        store(p, staged_->data(), staged_->data() + row_bytes());
    }
    next_pos_ = static_cast<int32_t>(length);
    use.finish();
}

}  // namespace kvchat
