#include "engine/cache/token_rows_conversion.h"

#include "engine/cache/axis_layer.h"
#include "engine/compute/kivi_block.h"
#include "engine/compute/kv_dtype.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace kvchat {

namespace {

// Records moved per backend call: a few hundred KiB, so the host records between the f32 rows and
// KV memory stay in cache.
constexpr int64_t kRunRecords = 256;

}  // namespace

TokenRowsConversion::TokenRowsConversion(LayerContents& contents, const LayerConfig& config, const Retention& retention,
                                         Backend& backend, int64_t kv_dim)
    : c_(contents), cfg_(config), retention_(retention), backend_(backend), kv_dim_(kv_dim) {}

void TokenRowsConversion::records_of(const TokenRows& rows, size_t first, int64_t n, uint8_t* host) const {
    const size_t d = static_cast<size_t>(kv_dim_);
    if (rows.form == TokenRows::Form::F32) {
        kv_store_records(cfg_.dtype, rows.k.data() + first * d, rows.v.data() + first * d, kv_dim_, n, host);
        return;
    }
    // Kept records go through as they are when the dtype agrees (what a round trip through f32
    // would give), converted otherwise; dequantized rows come from their f32 values.
    const size_t src_rb = rows.record_bytes(), rb = c_.record_bytes();
    for (size_t i = first; i < first + static_cast<size_t>(n); ++i, host += rb) {
        if (rows.exact[i])
            kv_convert_row(rows.dtype, rows.records.data() + i * src_rb, cfg_.dtype, host, 2 * kv_dim_);
        else
            kv_store_records(cfg_.dtype, rows.k.data() + i * d, rows.v.data() + i * d, kv_dim_, 1, host);
    }
}

bool TokenRowsConversion::representable(const TokenRows& rows, size_t i) const {
    const size_t d = static_cast<size_t>(kv_dim_);
    if (rows.form == TokenRows::Form::F32)
        return kv_representable(cfg_.dtype, rows.k.data() + i * d, kv_dim_) &&
               kv_representable(cfg_.dtype, rows.v.data() + i * d, kv_dim_);
    std::vector<float> f32(2 * d);
    kv_load_row(rows.dtype, rows.records.data() + i * rows.record_bytes(), f32.data(), 2 * kv_dim_);
    return kv_representable(cfg_.dtype, f32.data(), 2 * kv_dim_);
}

void TokenRowsConversion::export_to(TokenRows& rows, TokenRows::Form form) const {
    const KvArena& arena = c_.arena;
    KvArena::Use use(arena, c_.slots);
    // Where each held token is: slot `index`, residual record `index`, or token j of block `index`
    // (in the blocks' order).
    enum class Kind : uint8_t { Slot, Residual, Block };
    struct Src {
        int32_t pos;
        Kind kind;
        int32_t index;
        int32_t j;
    };
    std::vector<Src> src;
    src.reserve(static_cast<size_t>(c_.tokens_held()));
    for (int64_t i = 0; i < c_.slots.used(); ++i)
        if (c_.slots.at(i) != SlotPositions::kEmpty) src.push_back({c_.slots.at(i), Kind::Slot, static_cast<int32_t>(i), 0});
    if (c_.quant) {
        const auto& blocks = c_.quant->blocks();
        for (size_t b = 0; b < blocks.size(); ++b)
            for (int j = 0; j < blocks[b].count; ++j)
                src.push_back({blocks[b].first + j, Kind::Block, static_cast<int32_t>(b), j});
        for (int64_t i = 0; i < c_.quant->residual_count(); ++i)
            src.push_back({c_.quant->residual_first() + static_cast<int32_t>(i), Kind::Residual, static_cast<int32_t>(i), 0});
    }
    std::sort(src.begin(), src.end(), [](const Src& a, const Src& b) { return a.pos < b.pos; });

    const size_t n = src.size(), d = static_cast<size_t>(kv_dim_);
    rows.kv_dim = kv_dim_;
    rows.nbits = cfg_.nbits;
    rows.group = cfg_.group;
    rows.dtype = cfg_.dtype;
    rows.form = form;
    const bool kept = form == TokenRows::Form::Kept;
    const bool dequantized = c_.quant && !c_.quant->blocks().empty();
    rows.pos.resize(n);
    rows.k.resize(kept && !dequantized ? 0 : n * d);
    rows.v.resize(kept && !dequantized ? 0 : n * d);
    rows.exact.resize(n);
    const size_t rb = c_.record_bytes(), half = rb / 2;
    rows.records.resize(kept ? n * rb : 0);
    // Records come down a run of consecutive slots (or residual records) at a time: straight into
    // rows.records when kept, else into host memory the size of one run and on to f32. Blocks
    // come down one at a time.
    std::vector<uint8_t> host;
    for (size_t i = 0; i < n;) {
        const Src& s = src[i];
        if (s.kind == Kind::Block) {
            const KiviFormat& f = c_.quant->format();
            host.resize(std::max(host.size(), f.block_bytes));
            backend_.kv_download(host.data(), arena.block(c_.quant->blocks()[static_cast<size_t>(s.index)].record),
                                 f.block_bytes);
            size_t e = i;
            for (; e < n && src[e].kind == Kind::Block && src[e].index == s.index; ++e) {
                rows.pos[e] = src[e].pos;
                kivi_dequantize_token(f, host.data(), src[e].j, rows.k.data() + e * d, rows.v.data() + e * d);
                rows.exact[e] = 0;
            }
            i = e;
            continue;
        }
        size_t e = i + 1;
        while (e < n && (kept || e - i < static_cast<size_t>(kRunRecords)) && src[e].kind == s.kind &&
               src[e].index == src[e - 1].index + 1)
            ++e;
        const uint8_t* at = s.kind == Kind::Slot ? arena.slot(s.index) : arena.residual_slot(s.index);
        if (kept) {
            backend_.kv_download(rows.records.data() + i * rb, at, (e - i) * rb);
            for (size_t t = i; t < e; ++t) {
                rows.pos[t] = src[t].pos;
                rows.exact[t] = 1;
            }
            i = e;
            continue;
        }
        host.resize(std::max(host.size(), (e - i) * rb));
        backend_.kv_download(host.data(), at, (e - i) * rb);
        for (size_t t = i; t < e; ++t) {
            const uint8_t* rec = host.data() + (t - i) * rb;
            rows.pos[t] = src[t].pos;
            kv_load_row(cfg_.dtype, rec, rows.k.data() + t * d, kv_dim_);
            kv_load_row(cfg_.dtype, rec + half, rows.v.data() + t * d, kv_dim_);
            rows.exact[t] = 1;
        }
        i = e;
    }
    use.finish();
}

size_t TokenRowsConversion::residual_from(const TokenRows& rows, int64_t length) const {
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

bool TokenRowsConversion::can_import(const TokenRows& rows, int64_t length) const {
    const int sink_end = retention_.sink_end(), recent = retention_.recent();
    const bool full = c_.full();
    // A dequantized row may only be quantized again, into blocks no finer than its own: more bits
    // or a smaller group cannot be recovered from its codes.
    const bool requantize = !full && cfg_.nbits <= rows.nbits && cfg_.group >= rows.group;
    const bool narrower = cfg_.dtype != KvDtype::F32 && rows.dtype != cfg_.dtype;
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
        if (rows.exact[i] && full && narrower && !representable(rows, i)) return false;
    }
    if (full) return true;
    // Which rows import leaves in full precision (the sinks and the final residual): the
    // residual's bookkeeping of LayerContents::store(), without the data. Those rows must be exact.
    const size_t from = residual_from(rows, length);
    int64_t rf = 0, rc = 0;
    for (size_t r = from; r < rows.pos.size() && rows.pos[r] < length; ++r) {
        const int32_t p = rows.pos[r];
        if (p < sink_end) continue;
        if (rc == 0) rf = p;
        ++rc;
        if (recent > 0 && !retention_.keeps_all() && rf < p + 1 - recent) {
            const int64_t drop = std::min<int64_t>(rc, p + 1 - recent - rf);
            rf += drop;
            rc -= drop;
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
        if (kept_full && narrower && !representable(rows, r)) return false;
    }
    return true;
}

void TokenRowsConversion::import(const TokenRows& rows, int64_t length) {
    c_.clear();
    KvArena::Use use(c_.arena, c_.slots);
    bool contiguous = static_cast<int64_t>(rows.pos.size()) == length;
    for (size_t i = 0; contiguous && i < rows.pos.size(); ++i) contiguous = rows.pos[i] == static_cast<int32_t>(i);
    if (!c_.full() && retention_.keeps_all() && contiguous) {
        // The blocks and residual that adding the tokens one by one would leave (a block each
        // time the residual passes `residual`), quantized straight from the rows.
        c_.quant->import_contiguous(
            length, [&](int64_t first, int64_t n, uint8_t* host) { records_of(rows, static_cast<size_t>(first), n, host); },
            c_.arena, backend_);
        c_.arena.mark(0, c_.used_bytes());
    } else if (c_.full()) {
        import_full(rows, length);
    } else {
        import_by_store(rows, length);
    }
    c_.next_pos = static_cast<int32_t>(length);
    use.finish();
}

void TokenRowsConversion::import_full(const TokenRows& rows, int64_t length) {
    const int32_t last = static_cast<int32_t>(length - 1);
    const bool ring = !retention_.keeps_all();
    const size_t from = residual_from(rows, length);
    const size_t rb = c_.record_bytes();
    std::vector<uint8_t> host;
    // A run: rows [row0, row0 + m) going to slots [slot0, slot0 + m), uploaded in one call.
    int64_t slot0 = 0, m = 0;
    size_t row0 = 0;
    auto flush = [&] {
        if (m == 0) return;
        host.resize(static_cast<size_t>(m) * rb);
        records_of(rows, row0, m, host.data());
        backend_.kv_upload(c_.arena.slot(slot0), host.data(), host.size());
        c_.arena.mark(c_.arena.slot_offset(slot0), c_.arena.slot_offset(slot0 + m));
        m = 0;
    };
    for (size_t i = 0; i < rows.pos.size(); ++i) {
        const int32_t p = rows.pos[i];
        if (p >= length) break;
        if ((ring && retention_.skips(p, last)) || (p >= retention_.sink_end() && i < from)) {
            ++c_.evicted;
            continue;
        }
        const int64_t s = c_.slots.slot_for(p);
        c_.make_room(s);
        if (c_.slots.put(s, p)) ++c_.evicted;
        if (m > 0 && (s != slot0 + m || i != row0 + static_cast<size_t>(m) || m == kRunRecords)) flush();
        if (m == 0) {
            slot0 = s;
            row0 = i;
        }
        ++m;
    }
    flush();
}

void TokenRowsConversion::import_by_store(const TokenRows& rows, int64_t length) {
    const size_t from = residual_from(rows, length);
    const size_t rb = c_.record_bytes(), half = rb / 2;
    // The kept rows go into KV memory a run at a time (one upload), then each is stored as the
    // append stores it: into its sink slot, or through the residual into blocks.
    std::vector<uint8_t> host(static_cast<size_t>(kRunRecords) * rb);
    std::unique_ptr<KvMemory> staged = backend_.alloc_kv();
    staged->resize(host.size());
    std::vector<size_t> run;
    run.reserve(static_cast<size_t>(kRunRecords));
    auto flush = [&] {
        if (run.empty()) return;
        for (size_t t = 0; t < run.size(); ++t) records_of(rows, run[t], 1, host.data() + t * rb);
        backend_.kv_upload(staged->data(), host.data(), run.size() * rb);
        for (size_t t = 0; t < run.size(); ++t) {
            const uint8_t* rec = staged->data() + t * rb;
            c_.store(rows.pos[run[t]], rec, rec + half, retention_, backend_);
        }
        run.clear();
    };
    for (size_t i = 0; i < rows.pos.size(); ++i) {
        const int32_t p = rows.pos[i];
        if (p >= length) break;
        if (p >= retention_.sink_end() && i < from) {
            ++c_.evicted;
            continue;
        }
        run.push_back(i);
        if (static_cast<int64_t>(run.size()) == kRunRecords) flush();
    }
    flush();
}

}  // namespace kvchat
