#include "engine/cache/layer_snapshot_format.h"

#include "engine/cache/byte_io.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace kvchat {

namespace {

constexpr uint32_t kLayerMagic = 0x5259414C;   // "LAYR"
constexpr uint32_t kLayerMagic2 = 0x3259414C;  // "LAY2"
constexpr uint32_t kLayerMagic3 = 0x3359414C;  // "LAY3"
constexpr size_t kFilePage = 4096;
constexpr int32_t kEmpty = SlotPositions::kEmpty;
// Records moved through host memory at a time (written, or converted from an older format as
// they load): a few hundred KiB, cache-sized.
constexpr int64_t kConvertRecords = 128;

// Calls fn(first, end) for each run of consecutive filled slots among positions [0, n).
template <class Fn>
void for_each_filled_run(const int32_t* pos, int64_t n, Fn fn) {
    for (int64_t i = 0; i < n;) {
        if (pos[i] == kEmpty) {
            ++i;
            continue;
        }
        int64_t j = i + 1;
        while (j < n && pos[j] != kEmpty) ++j;
        fn(i, j);
        i = j;
    }
}

}  // namespace

LayerSnapshotFormat::LayerSnapshotFormat(LayerContents& contents, Backend& backend, KvDtype dtype, int index,
                                         std::string layout, std::string layout_without_dtype)
    : c_(contents), backend_(backend), dtype_(dtype), index_(index), layout_(std::move(layout)),
      layout_without_dtype_(std::move(layout_without_dtype)) {}

void LayerSnapshotFormat::write(std::string& out, int64_t file_offset) const {
    KvArena::Use use(c_.arena, c_.slots);
    const int64_t n_slots = c_.slots.used();
    const size_t rb = c_.record_bytes();
    // One allocation: a checkpoint is taken inside a turn's time to first token, and growing the
    // string by doubling would copy and fault in its megabytes several times.
    out.reserve(out.size() + 256 + static_cast<size_t>(n_slots) * (sizeof(int32_t) + rb) +
                (c_.full() ? 0
                           : static_cast<size_t>(c_.quant->residual_count()) * rb +
                                 c_.quant->blocks().size() * (8 + c_.quant->format().block_bytes)));
    const size_t begin = out.size();
    ByteWriter w(out);
    w.put<uint32_t>(kLayerMagic3);
    w.str(layout_);
    w.put<int32_t>(c_.next_pos);
    w.put<int64_t>(c_.evicted);
    w.put<int64_t>(n_slots);
    w.bytes(c_.slots.positions(), static_cast<size_t>(n_slots) * sizeof(int32_t));
    uint32_t pad = 0;
    if (file_offset >= 0 && c_.full() && n_slots > 0) {
        const size_t data_at = static_cast<size_t>(file_offset) + (out.size() - begin) + sizeof pad;
        pad = static_cast<uint32_t>((kFilePage - data_at % kFilePage) % kFilePage);
    }
    w.put<uint32_t>(pad);
    out.append(pad, '\0');
    // The filled slots' records, runs of consecutive filled slots a bounded number of records at
    // a time through a cache-sized host buffer (ByteWriter::extend would zero-fill megabytes that
    // the download then overwrites).
    std::vector<uint8_t> host;
    for_each_filled_run(c_.slots.positions(), n_slots, [&](int64_t i, int64_t j) {
        for (int64_t s = i; s < j; s += kConvertRecords) {
            const size_t n = static_cast<size_t>(std::min(kConvertRecords, j - s)) * rb;
            host.resize(std::max(host.size(), n));
            backend_.kv_download(host.data(), c_.arena.slot(s), n);
            w.bytes(host.data(), n);
        }
    });
    if (c_.quant) c_.quant->save(w, c_.arena, backend_);
    use.finish();
}

void LayerSnapshotFormat::read(ByteReader& r) {
    c_.clear();
    try {
        read_into(r);
    } catch (...) {
        c_.clear();
        throw;
    }
}

void LayerSnapshotFormat::read_into(ByteReader& r) {
    KvArena& arena = c_.arena;
    const std::string layer = "layer " + std::to_string(index_);
    const uint32_t magic = r.get<uint32_t>("layer magic");
    if (magic != kLayerMagic && magic != kLayerMagic2 && magic != kLayerMagic3) r.fail(layer + " has a bad magic number");
    // The formats before LAY3 kept f32 records under a layout without dtype: they load into a
    // layer of any dtype, converted.
    const KvDtype src = magic == kLayerMagic3 ? dtype_ : KvDtype::F32;
    const std::string& want = magic == kLayerMagic3 ? layout_ : layout_without_dtype_;
    const std::string lay = r.str("layer layout", 4096);
    if (lay != want) r.fail("the snapshot's layer is '" + lay + "' but this cache's is '" + want + "'");
    const size_t rb = c_.record_bytes();
    const int64_t values = static_cast<int64_t>(rb / kv_dtype_bytes(dtype_));  // per record
    const size_t src_rec = static_cast<size_t>(values) * kv_dtype_bytes(src);
    const int32_t next = r.get<int32_t>("next position");
    const int64_t evicted = r.get<int64_t>("evicted count");
    if (next < 0 || evicted < 0) r.fail(layer + ": negative counts");
    const int64_t n_slots = r.get<int64_t>("slot count");
    if (n_slots < 0 || n_slots > arena.slot_limit() || static_cast<uint64_t>(n_slots) * sizeof(int32_t) > r.remaining())
        r.fail(layer + ": bad slot count " + std::to_string(n_slots));
    std::vector<int32_t> pos(static_cast<size_t>(n_slots));
    const char* pos_bytes = r.take(pos.size() * sizeof(int32_t), "slot positions");
    if (!pos.empty()) std::memcpy(pos.data(), pos_bytes, pos.size() * sizeof(int32_t));
    if (!c_.slots.valid(pos.data(), n_slots, next)) r.fail(layer + ": its slots hold impossible positions");
    if (magic != kLayerMagic) {
        const uint32_t pad = r.get<uint32_t>("padding length");
        if (pad >= kFilePage) r.fail(layer + ": bad padding");
        r.take(pad, "padding");
    }
    KvArena::Use use(arena, c_.slots);
    // The capacity the layer had when it was saved (it grows by doubling from 16), so the first
    // turn after a reopen does not reallocate and copy the whole layer.
    int64_t cap = 16;
    while (cap < n_slots) cap *= 2;
    cap = std::max(n_slots, std::min(cap, arena.slot_limit()));
    // The records of the filled slots, in slot order.
    const int64_t n_records = std::count_if(pos.begin(), pos.end(), [](int32_t p) { return p != kEmpty; });
    const char* data = r.take(static_cast<size_t>(n_records) * src_rec, "slot data");
    // Every slot filled and the data page-aligned in a snapshot file: the layer maps it
    // (copy-on-write) instead of reading it, so reopening a long conversation costs no copy.
    bool mapped = false;
    const int64_t at = r.file_offset(data);
    if (n_records == n_slots && n_slots > 0 && !arena.memory().offloaded() && c_.full() &&
        cap >= arena.slot_capacity() && at >= 0 && src == dtype_) {
        mapped = arena.adopt_slots(r.file_fd(), static_cast<uint64_t>(at), n_slots, cap);
        if (mapped) c_.slots.grow(cap);
    }
    if (!mapped) {
        if (n_slots > arena.slot_capacity()) {
            arena.grow_slots(cap);
            c_.slots.grow(arena.slot_capacity());
        }
        // One upload per run of consecutive filled slots (their records lie one after another);
        // records of an older format are converted a bounded number at a time.
        std::vector<uint8_t> converted;
        for_each_filled_run(pos.data(), n_slots, [&](int64_t i, int64_t j) {
            if (src == dtype_) {
                const size_t n = static_cast<size_t>(j - i) * rb;
                backend_.kv_upload(arena.slot(i), data, n);
                data += n;
                return;
            }
            for (int64_t s = i; s < j; s += kConvertRecords) {
                const int64_t m = std::min(kConvertRecords, j - s);
                converted.resize(static_cast<size_t>(m) * rb);
                kv_convert_row(src, data, dtype_, converted.data(), m * values);
                backend_.kv_upload(arena.slot(s), converted.data(), converted.size());
                data += static_cast<size_t>(m) * src_rec;
            }
        });
    }
    c_.slots.assign(pos.data(), n_slots);
    if (c_.quant) c_.quant->load(r, src, next, index_, arena, backend_);
    c_.next_pos = next;
    c_.evicted = evicted;
    arena.mark(0, c_.used_bytes());
    use.finish();
}

}  // namespace kvchat
