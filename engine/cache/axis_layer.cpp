#include "engine/cache/axis_layer.h"

#include "engine/compute/attention.h"
#include "engine/cache/offload_tier.h"
#include "engine/cache/offloaded_memory.h"
#include "engine/cache/resident_memory.h"
#include "engine/error.h"

#include <algorithm>
#include <limits>

namespace kvchat {

namespace {

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

size_t record_bytes(const LayerSpec& spec, const LayerConfig& cfg) {
    return 2 * static_cast<size_t>(spec.shape.n_head_kv) * spec.shape.head_dim * kv_dtype_bytes(cfg.dtype);
}

KvArena make_arena(LayerMemory& memory, const LayerSpec& spec, const LayerConfig& cfg, const Retention& ret,
                   const std::optional<KiviFormat>& kivi) {
    const Regions r = regions(cfg, ret, kivi);
    return KvArena(memory, spec.index, record_bytes(spec, cfg), r.block_bytes, r.slots, r.limit, r.residual, r.blocks, cfg.fixed);
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

AxisLayer::AxisLayer(const LayerSpec& spec, const LayerConfig& cfg, Backend& backend, OffloadTier* tier, int tier_index,
                     std::shared_ptr<StagingMemory> staging)
    : AxisLayer(spec, cfg, backend, tier, tier_index, std::move(staging), kivi_format(spec, cfg)) {}

AxisLayer::AxisLayer(const LayerSpec& spec, const LayerConfig& cfg, Backend& backend, OffloadTier* tier, int tier_index,
                     std::shared_ptr<StagingMemory> staging, const std::optional<KiviFormat>& kivi)
    : spec_(spec), cfg_(cfg), backend_(backend), kv_dim_(static_cast<int64_t>(spec.shape.n_head_kv) * spec.shape.head_dim),
      retention_(cfg.retention, cfg.window, cfg.sinks, spec.model_window),
      memory_(layer_memory(cfg, backend, tier, tier_index)),
      contents_(make_arena(*memory_, spec, cfg, retention_, kivi), retention_.slot_positions(kivi.has_value()),
                kivi ? std::optional<QuantizedTokens>(std::in_place, *kivi, cfg.residual, cfg.dtype) : std::nullopt),
      staged_(staging ? std::move(staging) : std::make_shared<StagingMemory>(backend)) {}

size_t AxisLayer::reserved_bytes(const LayerSpec& spec, const LayerConfig& cfg) {
    const Regions r = regions(cfg, Retention(cfg.retention, cfg.window, cfg.sinks, spec.model_window), kivi_format(spec, cfg));
    return KvArena::capacity_bytes(record_bytes(spec, cfg), r.block_bytes, r.slots, r.residual, r.blocks);
}

LayerSnapshotFormat AxisLayer::snapshot_format() const {
    return LayerSnapshotFormat(contents_, backend_, cfg_.dtype, spec_.index, layout(), layout_core());
}

TokenRowsConversion AxisLayer::conversion() const {
    return TokenRowsConversion(contents_, cfg_, retention_, backend_, kv_dim_);
}

size_t AxisLayer::bytes_after(int64_t first, int64_t n) const {
    const KvArena& arena = contents_.arena;
    if (cfg_.fixed) return arena.capacity_bytes();
    if (full()) {
        // A slot's index never exceeds its position (see SlotPositions), and rings stop at their limit.
        const int64_t slots = std::max<int64_t>(contents_.slots.used(), std::min<int64_t>(arena.slot_limit(), first + n));
        return arena.bytes_with(slots, 0);
    }
    return arena.bytes_with(0, contents_.quant->blocks_after(n, arena.blocks_used()));
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
    // A quantized layer rounds alike: its residual is that same f16 cache, so until tokens are
    // quantized it computes what dynamic does, bit for bit, and its blocks quantize f16 values.
    AttentionShape shape = s;
    // (A bf16 cache cannot hold the f16 grid: it attends in f32 over its own rounding.)
    const bool f16 = s.f16_rounding && cfg_.dtype != KvDtype::BF16;
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
    uint8_t* kst = staged_->fit(2 * rows);
    uint8_t* vst = kst + rows;
    backend_.kv_store(cfg_.dtype, knew, n, kst);
    backend_.kv_store(cfg_.dtype, *vsrc, n, vst);

    LayerContents& c = contents_;
    KvArena::Use use(c.arena, c.slots);
    AttentionInput in;
    in.dtype = cfg_.dtype;
    in.f16_probs = f16;
    in.q = q.data;
    in.q_sink = sink_q ? qsink.data : nullptr;
    in.qpos = pos;
    in.n_q = n;
    // While every query still sees every token (no position has left the window yet), the mask
    // is a keep-all layer's, and so is the kernel's path: a window or sinks that hide nothing
    // must not change a bit of the result.
    const bool hides = !retention_.keeps_all() && pos[n - 1] >= retention_.window();
    in.window = hides ? retention_.recent() : spec_.model_window;
    in.sink_end = hides ? retention_.sink_end() : 0;
    in.cancel = cancel;
    const int64_t stride = 2 * kv_dim_;
    auto view = [&](int64_t b, int64_t e) {
        if (e > b) in.slots.push_back({c.arena.slot(b), c.arena.slot(b) + row_bytes(), c.slots.positions() + b, e - b, stride});
    };
    // Views end at the last slot ever written, not the allocation, so two caches with the same
    // tokens split the work the same way whatever their growth history (bit-equal results).
    const int64_t n_slots = c.slots.used();
    if (c.slots.ordered()) {
        view(0, n_slots);
    } else {
        // A ring's slots in position order: the sinks, then from the oldest slot (the one the next
        // position takes) round to the newest. The kernel sums in view order, so a ring, a
        // residual and a layer that keeps every token give the same bits over the same tokens.
        // (A quantized layer's slots hold only its sinks.)
        const int64_t sinks = std::min<int64_t>(retention_.sinks(), n_slots);
        view(0, sinks);
        if (n_slots > sinks) {
            const int64_t oldest = std::clamp<int64_t>(c.slots.slot_for(c.next_pos), sinks, n_slots);
            view(oldest, n_slots);
            view(sinks, oldest);
        }
    }
    if (c.quant) c.quant->add_views(in, c.arena);
    in.slots.push_back({kst, vst, pos, n, kv_dim_});
    backend_.attend(in, shape, out);
    // Stopped part-way, `out` is incomplete: nothing of the chunk is kept.
    if (in.cancelled()) throw Cancelled("Prefilling was cancelled");

    // Keep the new tokens. A full-precision ring skips the ones this chunk would overwrite anyway.
    const bool ring = full() && !retention_.keeps_all();
    for (int64_t t = 0; t < n;) {
        if (ring && retention_.skips(pos[t], pos[n - 1])) {
            ++c.evicted;
            ++t;
            continue;
        }
        int64_t e = t + 1;
        while (e < n && !(ring && retention_.skips(pos[e], pos[n - 1]))) ++e;
        c.store_rows(pos + t, e - t, kst + t * row_bytes(), vst + t * row_bytes(), row_bytes(), retention_, backend_);
        t = e;
    }
    c.next_pos = pos[n - 1] + 1;
    use.finish();
}

void AxisLayer::crop(int64_t n_tokens) {
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(n_tokens, std::numeric_limits<int32_t>::max()));
    LayerContents& c = contents_;
    if (n >= c.next_pos) return;
    c.slots.crop(n);
    if (c.quant) c.quant->crop(n);
    c.next_pos = n;
    memory_->shrink(c.used_bytes());
}

void AxisLayer::reset() { contents_.clear(); }

int64_t AxisLayer::tokens_held() const { return contents_.tokens_held(); }

bool AxisLayer::can_crop_to(int64_t n) const {
    return retention_.can_crop_to(n, contents_.next_pos, contents_.oldest_recent(retention_));
}

LayerTelemetry AxisLayer::telemetry() const {
    const LayerContents& c = contents_;
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
    const int64_t rb = static_cast<int64_t>(c.record_bytes());
    if (full()) {
        t.capacity = c.arena.slot_capacity();
        t.bytes_full_precision = t.tokens_held * rb;
    } else {
        const int64_t sinks = c.slots.held();
        t.quantized_tokens = c.quant->quantized_count();
        t.residual_tokens = c.quant->residual_count();
        t.capacity = c.arena.slot_capacity() + c.arena.residual_capacity() + c.arena.block_capacity() * cfg_.group;
        t.bytes_full_precision = (sinks + c.quant->residual_count()) * rb;
        t.bytes_quantized = static_cast<int64_t>(c.quant->blocks().size()) * static_cast<int64_t>(c.quant->format().block_bytes);
    }
    const int64_t held_bytes = t.bytes_full_precision + t.bytes_quantized;
    (memory_->offloaded() ? t.bytes_slow : t.bytes_fast) = held_bytes;
    t.bytes_reserved = static_cast<int64_t>(c.arena.capacity_bytes());
    const int sink_end = retention_.sink_end();
    if (sink_end > 0) t.sink_end = std::min<int64_t>(sink_end, c.next_pos);
    const int32_t oldest = c.oldest_recent(retention_);
    if (oldest != SlotPositions::kEmpty) {
        t.window_begin = oldest;
        t.window_end = c.next_pos;
    }
    t.evicted = c.evicted;
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

void AxisLayer::save_state(std::string& out, int64_t file_offset) const { snapshot_format().write(out, file_offset); }

void AxisLayer::load_state(ByteReader& in) { snapshot_format().read(in); }

void AxisLayer::export_tokens(TokenRows& rows, TokenRows::Form form) const { conversion().export_to(rows, form); }

bool AxisLayer::can_import(const TokenRows& rows, int64_t length) const { return conversion().can_import(rows, length); }

void AxisLayer::import_tokens(const TokenRows& rows, int64_t length) {
    check_room(0, length);
    conversion().import(rows, length);
}

}  // namespace kvchat
