#include "engine/cache/snapshot.h"

#include "engine/cache/byte_io.h"
#include "engine/cache/cache_factory.h"
#include "engine/cache/checkpoint_pool.h"
#include "engine/compute/backend.h"
#include "engine/compute/thread_pool.h"
#include "engine/error.h"
#include "engine/common/atomic_file.h"

#include <fcntl.h>
#include <nmmintrin.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <exception>
#include <mutex>

namespace kvchat {

namespace {

constexpr char kMagic[8] = {'K', 'V', 'C', 'S', 'N', 'A', 'P', '\0'};
constexpr uint32_t kHead = 0x44414548, kLayer = 0x5259414C, kCheckpoint = 0x54504B43, kEnd = 0x00444E45;
// Version 2: the checkpoints' layer states as pieces of a per-layer source (the live layer's
// section followed by that layer's part of the pool), so bytes they share are stored once.
constexpr uint32_t kPool = 0x4C4F4F50, kCheckpoint2 = 0x32504B43;  // "POOL", "CKP2"
constexpr size_t kMaxSnapshot = size_t{1} << 40;

void write_section(AtomicFile& f, uint32_t tag, const std::string& payload) {
    std::string h;
    ByteWriter w(h);
    w.put<uint32_t>(tag);
    w.put<uint64_t>(payload.size());
    f.write(h);
    f.write(payload);
    const uint32_t crc = crc32c(payload.data(), payload.size());
    f.write(&crc, sizeof crc);
}

const char* tag_name(uint32_t tag) {
    switch (tag) {
        case kHead: return "header";
        case kLayer: return "layer";
        case kCheckpoint: return "checkpoint";
        case kPool: return "checkpoint pool";
        case kCheckpoint2: return "checkpoint";
        case kEnd: return "end";
        default: return "unknown";
    }
}

}  // namespace

namespace {

// The CRC instruction has a latency of 3 cycles and a throughput of 1, so three independent
// streams over consecutive stretches run about three times as fast as one; their registers are
// then joined by shifting over the bytes that followed them, a linear map on the 32-bit register.
constexpr size_t kStretch = 8192;

uint32_t crc_raw(uint32_t c, const uint8_t* p, size_t n) {
    uint64_t c64 = c;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        c64 = _mm_crc32_u64(c64, v);
    }
    uint32_t c32 = static_cast<uint32_t>(c64);
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}

// The register after `bytes` zero bytes, as a GF(2) matrix: column i is the image of bit i.
struct ZeroShift {
    uint32_t col[32];
    explicit ZeroShift(size_t bytes) {
        for (int i = 0; i < 32; ++i) {
            uint64_t c = uint32_t{1} << i;
            for (size_t k = 0; k < bytes / 8; ++k) c = _mm_crc32_u64(c, 0);
            col[i] = static_cast<uint32_t>(c);
        }
    }
    uint32_t operator()(uint32_t v) const {
        uint32_t r = 0;
        for (int i = 0; v; ++i, v >>= 1)
            if (v & 1) r ^= col[i];
        return r;
    }
};

// A snapshot's bytes, mapped: read once, by the checksums and the copies into the cache, and
// resident layers map their slot data copy-on-write from it. The mapping is of a private copy
// made at load (a memfd, filled by the kernel), not of the file: kvchat replaces snapshots by
// rename, but another program may truncate or rewrite one in place (`cp` over it, `truncate`),
// and a mapping of the file would then die of SIGBUS or change under the cache. Anything that
// cannot be copied so is read whole instead.
class SnapshotBytes {
public:
    SnapshotBytes(const std::string& path, size_t max_bytes) {
        // O_NONBLOCK: a FIFO under the snapshot's name must not block the open (it is then refused below).
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        struct stat st {};
        if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
            static_cast<unsigned long long>(st.st_size) <= max_bytes) {
            const int copy = private_copy(fd, static_cast<size_t>(st.st_size));
            if (copy >= 0) {
                void* m = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, copy, 0);
                if (m != MAP_FAILED) {
                    map_ = m;
                    view_ = std::string_view(static_cast<const char*>(m), static_cast<size_t>(st.st_size));
                    fd_ = copy;
                } else {
                    ::close(copy);
                }
            }
        }
        if (fd >= 0) ::close(fd);
        if (!map_) {
            copy_ = read_whole_file(path, max_bytes);  // (names the problem when there is one)
            view_ = copy_;
        }
    }
    ~SnapshotBytes() {
        close_file();
        if (map_) ::munmap(map_, view_.size());
    }
    // The open file behind the mapping (-1 when read into memory), for layers that map their
    // data from it; closed once they have.
    int fd() const { return fd_; }
    void close_file() const {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }
    SnapshotBytes(const SnapshotBytes&) = delete;
    SnapshotBytes& operator=(const SnapshotBytes&) = delete;
    std::string_view view() const { return view_; }

private:
    // A memfd holding the first `size` bytes of `fd`, or -1 (no memfd, no room, or the file was
    // cut short meanwhile: then it is read whole, and what it holds is judged as it is).
    static int private_copy(int fd, size_t size) {
        const int mem = ::memfd_create("kvchat-snapshot", MFD_CLOEXEC);
        if (mem < 0) return -1;
        off_t at = 0;
        while (static_cast<size_t>(at) < size) {
            const ssize_t n = ::sendfile(mem, fd, &at, size - static_cast<size_t>(at));
            if (n <= 0) {
                ::close(mem);
                return -1;
            }
        }
        return mem;
    }

    void* map_ = nullptr;
    std::string copy_;
    std::string_view view_;
    mutable int fd_ = -1;
};

// Runs job(i) for i in [0, n) on every thread of the pool, each taking the next index, so large
// and small jobs balance. The first error is rethrown.
template <class Job>
void run_jobs(ThreadPool& pool, size_t n, const Job& job) {
    std::atomic<size_t> next{0};
    std::exception_ptr error;
    std::mutex m;
    pool.run([&](int, int) {
        for (size_t i; (i = next.fetch_add(1)) < n;) {
            try {
                job(i);
            } catch (...) {
                std::lock_guard<std::mutex> lock(m);
                if (!error) error = std::current_exception();
            }
        }
    });
    if (error) std::rethrow_exception(error);
}

// A checkpoint section left in the mapped file; its checksum is verified on first use.
class MappedCheckpoint final : public CheckpointBytes {
public:
    MappedCheckpoint(std::shared_ptr<const SnapshotBytes> file, std::string_view payload, uint32_t crc)
        : file_(std::move(file)), payload_(payload), crc_(crc) {}
    bool intact() const override {
        std::call_once(checked_, [this] { ok_ = crc32c(payload_.data(), payload_.size()) == crc_; });
        return ok_;
    }

private:
    std::shared_ptr<const SnapshotBytes> file_;
    std::string_view payload_;
    uint32_t crc_;
    mutable std::once_flag checked_;
    mutable bool ok_ = false;
};

// The pool section of a version-2 snapshot, checksummed when a checkpoint is first used.
class MappedPool {
public:
    MappedPool(std::string_view payload, uint32_t crc, std::vector<std::string_view> parts)
        : payload_(payload), crc_(crc), parts_(std::move(parts)) {}
    bool intact() const {
        std::call_once(checked_, [this] { ok_ = crc32c(payload_.data(), payload_.size()) == crc_; });
        return ok_;
    }
    std::string_view part(size_t layer) const { return parts_[layer]; }

private:
    std::string_view payload_;
    uint32_t crc_;
    std::vector<std::string_view> parts_;
    mutable std::once_flag checked_;
    mutable bool ok_ = false;
};

// A version-2 checkpoint: its layer states are pieces of the live layers' sections and the
// pool, all in the mapped file; decoded (and checksummed) when it is first used.
class PiecedCheckpoint final : public CheckpointBytes {
public:
    PiecedCheckpoint(std::shared_ptr<const SnapshotBytes> file, std::string_view payload, uint32_t crc,
                     std::shared_ptr<const MappedPool> pool, std::vector<std::string_view> live,
                     std::vector<std::string_view> encoded, std::string what)
        : file_(std::move(file)), payload_(payload), crc_(crc), pool_(std::move(pool)), live_(std::move(live)),
          encoded_(std::move(encoded)), what_(std::move(what)) {}
    bool intact() const override {
        std::call_once(checked_, [this] {
            if (crc32c(payload_.data(), payload_.size()) != crc_ || !pool_->intact()) return;
            try {
                std::vector<std::string> states(encoded_.size());
                for (size_t i = 0; i < encoded_.size(); ++i)
                    states[i] = decode_checkpoint_state(encoded_[i], live_[i], pool_->part(i),
                                                        what_ + " layer " + std::to_string(i));
                states_ = std::move(states);
                ok_ = true;
            } catch (const Error&) {
            }
        });
        return ok_;
    }
    std::string_view state(size_t i, std::string_view) const override {
        return ok_ && i < states_.size() ? std::string_view(states_[i]) : std::string_view();
    }

private:
    std::shared_ptr<const SnapshotBytes> file_;
    std::string_view payload_;
    uint32_t crc_;
    std::shared_ptr<const MappedPool> pool_;
    std::vector<std::string_view> live_, encoded_;
    std::string what_;
    mutable std::once_flag checked_;
    mutable bool ok_ = false;
    mutable std::vector<std::string> states_;
};

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
    const auto* p = static_cast<const uint8_t*>(data);
    uint32_t c = ~crc;
    if (n >= 3 * kStretch) {
        static const ZeroShift one(kStretch), two(2 * kStretch);
        for (; n >= 3 * kStretch; p += 3 * kStretch, n -= 3 * kStretch) {
            uint64_t a = c, b = 0, d = 0;
            for (size_t i = 0; i < kStretch; i += 8) {
                uint64_t x, y, z;
                std::memcpy(&x, p + i, 8);
                std::memcpy(&y, p + kStretch + i, 8);
                std::memcpy(&z, p + 2 * kStretch + i, 8);
                a = _mm_crc32_u64(a, x);
                b = _mm_crc32_u64(b, y);
                d = _mm_crc32_u64(d, z);
            }
            c = two(static_cast<uint32_t>(a)) ^ one(static_cast<uint32_t>(b)) ^ static_cast<uint32_t>(d);
        }
    }
    return ~crc_raw(c, p, n);
}

void save_snapshot(const std::string& path, const Cache& cache, const std::string& fingerprint,
                   std::span<const CacheCheckpoint> all_checkpoints, uint32_t format_version) {
    if (format_version != 1 && format_version != kSnapshotVersion)
        throw Error("cannot write snapshot format version " + std::to_string(format_version));
    // A checkpoint whose file section turned out damaged is left behind.
    std::vector<const CacheCheckpoint*> checkpoints;
    for (const CacheCheckpoint& cp : all_checkpoints)
        if (cp.intact() && cp.layer_states.size() == cache.n_layers()) checkpoints.push_back(&cp);
    AtomicFile f(path);
    f.write(kMagic, sizeof kMagic);
    const uint32_t version = format_version;
    f.write(&version, sizeof version);
    std::string head;
    {
        ByteWriter w(head);
        w.str(fingerprint);
        w.str(cache.spec_text());
        w.put<int64_t>(cache.seq_length());
        w.bytes(cache.tokens().data(), cache.tokens().size() * sizeof(int32_t));
        w.put<uint32_t>(static_cast<uint32_t>(cache.n_layers()));
        for (size_t i = 0; i < cache.n_layers(); ++i) w.str(cache.layer(i).layout());
        w.put<uint32_t>(static_cast<uint32_t>(checkpoints.size()));
    }
    write_section(f, kHead, head);
    // Where the next section's payload starts in the file, so each layer can page-align its data.
    uint64_t offset = sizeof kMagic + sizeof version + 16 + head.size() + 12;
    // Layers a checkpoint holds a state of keep their section, the source its pieces refer to.
    std::vector<bool> shared(cache.n_layers(), false);
    for (const CacheCheckpoint* cp : checkpoints)
        for (size_t i = 0; i < cp->layer_states.size() && i < shared.size(); ++i)
            if (!cp->layer_states[i].empty()) shared[i] = true;
    std::vector<std::string> kept(cache.n_layers());
    CheckpointPoolWriter pool(cache.n_layers());
    std::string state;
    for (size_t i = 0; i < cache.n_layers(); ++i) {
        state.clear();
        ByteWriter w(state);
        w.put<uint32_t>(static_cast<uint32_t>(i));
        cache.layer(i).save_state(state, static_cast<int64_t>(offset + state.size()));
        write_section(f, kLayer, state);
        offset += state.size() + 16;
        if (shared[i] && version >= 2) {
            kept[i].swap(state);
            pool.set_live(i, kept[i]);
        }
    }
    if (version == 1) {
        for (const CacheCheckpoint* cp : checkpoints) {
            state.clear();
            ByteWriter w(state);
            w.str(cp->spec);
            w.put<int64_t>(cp->length);
            w.put<uint32_t>(static_cast<uint32_t>(cp->layer_states.size()));
            for (size_t i = 0; i < cp->layer_states.size(); ++i) {
                const std::string_view s = cp->state(i);
                w.put<uint64_t>(s.size());
                w.bytes(s.data(), s.size());
            }
            write_section(f, kCheckpoint, state);
        }
    } else if (!checkpoints.empty()) {
        std::vector<std::string> encoded;
        for (const CacheCheckpoint* cpp : checkpoints) {
            const CacheCheckpoint& cp = *cpp;
            state.clear();
            ByteWriter w(state);
            w.str(cp.spec);
            w.put<int64_t>(cp.length);
            w.put<uint32_t>(static_cast<uint32_t>(cp.layer_states.size()));
            std::string pieces;
            for (size_t i = 0; i < cp.layer_states.size(); ++i) {
                pieces.clear();
                if (!cp.layer_states[i].empty()) pool.encode(i, cp.state(i), pieces);
                w.put<uint64_t>(pieces.size());
                w.bytes(pieces.data(), pieces.size());
            }
            encoded.push_back(state);
        }
        write_section(f, kPool, pool.pool_payload());
        for (const std::string& e : encoded) write_section(f, kCheckpoint2, e);
    }
    write_section(f, kEnd, {});
    f.commit();
}

LoadedSnapshot load_snapshot(const std::string& path, const std::vector<LayerSpec>& layers,
                             const std::string& fingerprint, Backend& backend) {
    ThreadPool& pool = backend.pool();
    const auto bytes = std::make_shared<const SnapshotBytes>(path, kMaxSnapshot);
    const std::string_view data = bytes->view();
    const std::string what = "snapshot '" + path + "'";
    ByteReader file(data, what);
    if (data.size() < sizeof kMagic || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0)
        throw Error(what + ": not a kvchat cache snapshot (bad magic)");
    file.take(sizeof kMagic, "magic");
    const uint32_t version = file.get<uint32_t>("format version");
    if (version != 1 && version != kSnapshotVersion)
        throw Error(what + ": format version " + std::to_string(version) + " is not supported (this build reads version " +
                    std::to_string(kSnapshotVersion) + ")");

    // Every well-framed section's checksum, verified up front on all threads (checkpoints' only
    // when one is used). The walk below still reads the frames one by one and reports the first
    // problem in file order.
    struct Frame {
        const char* payload;
        uint64_t len;
        uint32_t crc;
        bool lazy = false;
        bool ok = false;
    };
    std::vector<Frame> frames;
    for (size_t at = sizeof kMagic + sizeof version; data.size() - at >= 16;) {
        uint32_t tag, crc;
        uint64_t len;
        std::memcpy(&tag, data.data() + at, 4);
        std::memcpy(&len, data.data() + at + 4, 8);
        if (len > data.size() - at - 16) break;
        std::memcpy(&crc, data.data() + at + 12 + len, 4);
        frames.push_back({data.data() + at + 12, len, crc, tag == kCheckpoint || tag == kCheckpoint2 || tag == kPool});
        at += 16 + len;
        if (tag == kEnd) break;
    }
    run_jobs(pool, frames.size(), [&](size_t i) {
        Frame& f = frames[i];
        if (!f.lazy) f.ok = crc32c(f.payload, static_cast<size_t>(f.len)) == f.crc;
    });
    size_t next_frame = 0;

    // Sections, each checked against its checksum before anything in it is believed; a
    // checkpoint's framing is read now and its checksum kept for when it is used.
    uint32_t last_crc = 0;
    auto section = [&](uint32_t expected) {
        const uint32_t tag = file.get<uint32_t>("section tag");
        if (tag != expected)
            file.fail(std::string("expected a ") + tag_name(expected) + " section, found " + tag_name(tag));
        const uint64_t len = file.get<uint64_t>("section length");
        if (len > file.remaining()) file.fail(std::string(tag_name(tag)) + " section is truncated");
        const char* p = file.take(static_cast<size_t>(len), "section");
        const uint32_t crc = file.get<uint32_t>("section checksum");
        const Frame* f = next_frame < frames.size() && frames[next_frame].payload == p ? &frames[next_frame++] : nullptr;
        if (tag != kCheckpoint && tag != kCheckpoint2 && tag != kPool && (f ? !f->ok : crc != crc32c(p, static_cast<size_t>(len))))
            file.fail(std::string(tag_name(tag)) + " section is damaged (checksum mismatch)");
        last_crc = crc;
        return std::string_view(p, static_cast<size_t>(len));
    };

    ByteReader head(section(kHead), what + " header");
    const std::string fp = head.str("model fingerprint", 4096);
    if (fp != fingerprint)
        throw Error(what + " was made with another model (fingerprint " + fp.substr(0, 16) + "..., this model " +
                    fingerprint.substr(0, 16) + "...)");
    const std::string spec = head.str("strategy spec", 4096);
    const int64_t n_tokens = head.get<int64_t>("token count");
    if (n_tokens < 0 || static_cast<uint64_t>(n_tokens) > head.remaining() / sizeof(int32_t))
        head.fail("bad token count " + std::to_string(n_tokens));
    std::vector<int32_t> tokens(static_cast<size_t>(n_tokens));
    const char* token_bytes = head.take(tokens.size() * sizeof(int32_t), "token ids");
    if (!tokens.empty()) std::memcpy(tokens.data(), token_bytes, tokens.size() * sizeof(int32_t));
    for (int32_t t : tokens)
        if (t < 0) head.fail("negative token id");
    const uint32_t n_layers = head.get<uint32_t>("layer count");
    if (n_layers != layers.size())
        throw Error(what + " has " + std::to_string(n_layers) + " layers, the model " + std::to_string(layers.size()));
    LoadedSnapshot out;
    try {
        out.cache = make_cache(layers, spec, backend);
    } catch (const Error& e) {
        throw Error(what + ": its strategy '" + spec + "' cannot be rebuilt: " + e.what());
    }
    Cache& cache = *out.cache;
    for (uint32_t i = 0; i < n_layers; ++i) {
        const std::string lay = head.str("layer layout", 4096);
        // Snapshots written before the dtype was recorded name none: their f32 layer states
        // load into a layer of any dtype (the layer section says which format it holds).
        const bool earlier = lay + " " + cache.layer(i).telemetry().dtype == cache.layer(i).layout();
        if (lay != cache.layer(i).layout() && !earlier)
            throw Error(what + ": layer " + std::to_string(i) + " is '" + lay + "' but the model's is '" + cache.layer(i).layout() + "'");
    }
    const uint32_t n_checkpoints = head.get<uint32_t>("checkpoint count");
    if (n_checkpoints > 1u << 20) head.fail("implausible checkpoint count");

    std::vector<std::string_view> layer_bytes;
    for (uint32_t i = 0; i < n_layers; ++i) layer_bytes.push_back(section(kLayer));
    out.checkpoints.reserve(n_checkpoints);
    // Version 2: the pool the checkpoints' pieces refer to, framed now, checksummed on first use.
    std::shared_ptr<const MappedPool> ckpt_pool;
    if (version >= 2 && n_checkpoints > 0) {
        const std::string_view payload = section(kPool);
        ByteReader r(payload, what + " checkpoint pool");
        if (r.get<uint32_t>("pool layer count") != n_layers) r.fail("its layer count differs from the cache's");
        std::vector<std::string_view> parts;
        for (uint32_t i = 0; i < n_layers; ++i) {
            const uint64_t len = r.get<uint64_t>("pool part length");
            if (len > r.remaining()) r.fail("pool part of layer " + std::to_string(i) + " is truncated");
            parts.emplace_back(r.take(static_cast<size_t>(len), "pool part"), static_cast<size_t>(len));
        }
        if (r.remaining() != 0) r.fail("trailing bytes after the pool");
        ckpt_pool = std::make_shared<const MappedPool>(payload, last_crc, std::move(parts));
    }
    for (uint32_t c = 0; c < n_checkpoints; ++c) {
        const std::string_view payload = section(version >= 2 ? kCheckpoint2 : kCheckpoint);
        ByteReader r(payload, what + " checkpoint " + std::to_string(c));
        CacheCheckpoint cp;
        cp.spec = r.str("checkpoint spec", 4096);
        cp.length = r.get<int64_t>("checkpoint length");
        if (cp.length < 0 || cp.length > n_tokens) r.fail("bad checkpoint length");
        const uint32_t n = r.get<uint32_t>("checkpoint layer count");
        if (n != n_layers) r.fail("checkpoint layer count differs from the cache's");
        for (uint32_t i = 0; i < n; ++i) {
            const uint64_t len = r.get<uint64_t>("checkpoint state length");
            if (len > r.remaining()) r.fail("checkpoint state is truncated");
            cp.layer_states.emplace_back(r.take(static_cast<size_t>(len), "checkpoint state"), static_cast<size_t>(len));
        }
        if (r.remaining() != 0) r.fail("trailing bytes after the checkpoint");
        if (ckpt_pool)
            cp.storage = std::make_shared<const PiecedCheckpoint>(bytes, payload, last_crc, ckpt_pool, layer_bytes,
                                                                  cp.layer_states, r.what());
        else
            cp.storage = std::make_shared<const MappedCheckpoint>(bytes, payload, last_crc);
        out.checkpoints.push_back(std::move(cp));
    }
    section(kEnd);
    if (file.remaining() != 0) file.fail("trailing bytes after the end section");

    // The layers load on all threads (one at a time when they share a slow tier, which lends
    // one layer at a time); the first failing layer is the one reported.
    std::vector<std::exception_ptr> errors(n_layers);
    auto load_layer = [&](size_t i) {
        try {
            ByteReader r(layer_bytes[i], what + " layer " + std::to_string(i));
            if (bytes->fd() >= 0) r.set_file(bytes->fd(), data.data());
            if (r.get<uint32_t>("layer index") != i) r.fail("layers are out of order");
            cache.layer(i).load_state(r);
            if (r.remaining() != 0) r.fail("trailing bytes after the layer");
            if (cache.layer(i).tokens_held() > n_tokens || cache.layer(i).end_position() != n_tokens)
                r.fail("does not line up with the snapshot's token history");
        } catch (...) {
            errors[i] = std::current_exception();
        }
    };
    if (cache.spill_path().empty())
        run_jobs(pool, n_layers, load_layer);
    else
        for (size_t i = 0; i < n_layers; ++i) load_layer(i);
    bytes->close_file();
    for (const std::exception_ptr& e : errors)
        if (e) std::rethrow_exception(e);
    cache.append_tokens(tokens.data(), n_tokens);
    return out;
}

SnapshotSummary read_snapshot_summary(const std::string& path) {
    const SnapshotBytes bytes(path, kMaxSnapshot);
    const std::string what = "snapshot '" + path + "'";
    ByteReader file(bytes.view(), what);
    if (bytes.view().size() < sizeof kMagic || std::memcmp(bytes.view().data(), kMagic, sizeof kMagic) != 0)
        throw Error(what + ": not a kvchat cache snapshot (bad magic)");
    file.take(sizeof kMagic, "magic");
    SnapshotSummary out;
    out.version = file.get<uint32_t>("format version");
    if (out.version != 1 && out.version != kSnapshotVersion)
        file.fail("format version " + std::to_string(out.version) + " is not supported");
    if (file.get<uint32_t>("section tag") != kHead) file.fail("expected a header section");
    const uint64_t len = file.get<uint64_t>("section length");
    if (len > file.remaining()) file.fail("header section is truncated");
    const char* p = file.take(static_cast<size_t>(len), "section");
    if (file.get<uint32_t>("section checksum") != crc32c(p, static_cast<size_t>(len)))
        file.fail("header section is damaged (checksum mismatch)");
    ByteReader head(std::string_view(p, static_cast<size_t>(len)), what + " header");
    head.str("model fingerprint", 4096);
    out.spec = head.str("strategy spec", 4096);
    out.tokens = head.get<int64_t>("token count");
    if (out.tokens < 0 || static_cast<uint64_t>(out.tokens) > head.remaining() / sizeof(int32_t))
        head.fail("bad token count " + std::to_string(out.tokens));
    head.take(static_cast<size_t>(out.tokens) * sizeof(int32_t), "token ids");
    const uint32_t n_layers = head.get<uint32_t>("layer count");
    for (uint32_t i = 0; i < n_layers; ++i) head.str("layer layout", 4096);
    out.checkpoints = head.get<uint32_t>("checkpoint count");
    return out;
}

}  // namespace kvchat
