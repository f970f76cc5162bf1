#include "engine/cache/snapshot.h"

#include "engine/cache/byte_io.h"
#include "engine/cache/cache_factory.h"
#include "engine/error.h"
#include "engine/store/atomic_file.h"

#include <nmmintrin.h>

#include <cstring>

namespace kvchat {

namespace {

constexpr char kMagic[8] = {'K', 'V', 'C', 'S', 'N', 'A', 'P', '\0'};
constexpr uint32_t kHead = 0x44414548, kLayer = 0x5259414C, kCheckpoint = 0x54504B43, kEnd = 0x00444E45;
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
        case kEnd: return "end";
        default: return "unknown";
    }
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
    const auto* p = static_cast<const uint8_t*>(data);
    uint64_t c = ~crc;
    while (n >= 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = static_cast<uint32_t>(c);
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}

void save_snapshot(const std::string& path, const Cache& cache, const std::string& fingerprint,
                   const std::vector<CacheCheckpoint>& checkpoints) {
    AtomicFile f(path);
    f.write(kMagic, sizeof kMagic);
    const uint32_t version = kSnapshotVersion;
    f.write(&version, sizeof version);
    std::string head;
    {
        ByteWriter w(head);
        w.str(fingerprint);
        w.str(cache.spec());
        w.put<int64_t>(cache.seq_length());
        w.bytes(cache.tokens().data(), cache.tokens().size() * sizeof(int32_t));
        w.put<uint32_t>(static_cast<uint32_t>(cache.n_layers()));
        for (size_t i = 0; i < cache.n_layers(); ++i) w.str(cache.layer(i).layout());
        w.put<uint32_t>(static_cast<uint32_t>(checkpoints.size()));
    }
    write_section(f, kHead, head);
    std::string state;
    for (size_t i = 0; i < cache.n_layers(); ++i) {
        state.clear();
        ByteWriter w(state);
        w.put<uint32_t>(static_cast<uint32_t>(i));
        cache.layer(i).save_state(state);
        write_section(f, kLayer, state);
    }
    for (const CacheCheckpoint& cp : checkpoints) {
        state.clear();
        ByteWriter w(state);
        w.str(cp.spec);
        w.put<int64_t>(cp.length);
        w.put<uint32_t>(static_cast<uint32_t>(cp.layer_states.size()));
        for (const std::string& s : cp.layer_states) {
            w.put<uint64_t>(s.size());
            w.bytes(s.data(), s.size());
        }
        write_section(f, kCheckpoint, state);
    }
    write_section(f, kEnd, {});
    f.commit();
}

LoadedSnapshot load_snapshot(const std::string& path, const std::vector<LayerSpec>& layers,
                             const std::string& fingerprint, ThreadPool& pool) {
    const std::string data = read_whole_file(path, kMaxSnapshot);
    const std::string what = "snapshot '" + path + "'";
    ByteReader file(data, what);
    if (data.size() < sizeof kMagic || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0)
        throw Error(what + ": not a kvchat cache snapshot (bad magic)");
    file.take(sizeof kMagic, "magic");
    const uint32_t version = file.get<uint32_t>("format version");
    if (version != kSnapshotVersion)
        throw Error(what + ": format version " + std::to_string(version) + " is not supported (this build reads version " +
                    std::to_string(kSnapshotVersion) + ")");
    // Sections, each checked against its checksum before anything in it is believed.
    auto section = [&](uint32_t expected) {
        const uint32_t tag = file.get<uint32_t>("section tag");
        if (tag != expected)
            file.fail(std::string("expected a ") + tag_name(expected) + " section, found " + tag_name(tag));
        const uint64_t len = file.get<uint64_t>("section length");
        if (len > file.remaining()) file.fail(std::string(tag_name(tag)) + " section is truncated");
        const char* p = file.take(static_cast<size_t>(len), "section");
        const uint32_t crc = file.get<uint32_t>("section checksum");
        if (crc != crc32c(p, static_cast<size_t>(len)))
            file.fail(std::string(tag_name(tag)) + " section is damaged (checksum mismatch)");
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
    std::memcpy(tokens.data(), head.take(tokens.size() * sizeof(int32_t), "token ids"), tokens.size() * sizeof(int32_t));
    for (int32_t t : tokens)
        if (t < 0) head.fail("negative token id");
    const uint32_t n_layers = head.get<uint32_t>("layer count");
    if (n_layers != layers.size())
        throw Error(what + " has " + std::to_string(n_layers) + " layers, the model " + std::to_string(layers.size()));
    LoadedSnapshot out;
    try {
        out.cache = make_cache(layers, spec, pool);
    } catch (const Error& e) {
        throw Error(what + ": its strategy '" + spec + "' cannot be rebuilt: " + e.what());
    }
    Cache& cache = *out.cache;
    for (uint32_t i = 0; i < n_layers; ++i) {
        const std::string lay = head.str("layer layout", 4096);
        if (lay != cache.layer(i).layout())
            throw Error(what + ": layer " + std::to_string(i) + " is '" + lay + "' but the model's is '" + cache.layer(i).layout() + "'");
    }
    const uint32_t n_checkpoints = head.get<uint32_t>("checkpoint count");
    if (n_checkpoints > 1u << 20) head.fail("implausible checkpoint count");

    for (uint32_t i = 0; i < n_layers; ++i) {
        ByteReader r(section(kLayer), what + " layer " + std::to_string(i));
        if (r.get<uint32_t>("layer index") != i) r.fail("layers are out of order");
        cache.layer(i).load_state(r);
        if (r.remaining() != 0) r.fail("trailing bytes after the layer");
        if (cache.layer(i).tokens_held() > n_tokens) r.fail("holds more tokens than the snapshot's history");
    }
    cache.append_tokens(tokens.data(), n_tokens);
    for (uint32_t c = 0; c < n_checkpoints; ++c) {
        ByteReader r(section(kCheckpoint), what + " checkpoint " + std::to_string(c));
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
        out.checkpoints.push_back(std::move(cp));
    }
    section(kEnd);
    if (file.remaining() != 0) file.fail("trailing bytes after the end section");
    return out;
}

}  // namespace kvchat
