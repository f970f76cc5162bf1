#include "engine/cache/checkpoint_pool.h"

#include "engine/cache/byte_io.h"
#include "engine/cache/snapshot.h"
#include "engine/error.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace kvchat {

namespace {

// Chunk sizes: small enough that the few chunks spoilt where a ring wraps or a window ends cost
// little next to a layer's megabytes, large enough that the index stays small.
constexpr size_t kMinChunk = 64, kMaxChunk = 2048;
// A cut where the top 8 bits of the hash are zero: they depend on the last 64 bytes alone, so
// the same content is cut the same way wherever it lies (about every 256 + 64 bytes).
constexpr uint64_t kCutMask = 0xFF00000000000000ull;

constexpr std::array<uint64_t, 256> make_gear() {
    std::array<uint64_t, 256> g{};
    uint64_t x = 0x9E3779B97F4A7C15ull;  // splitmix64: fixed, so cuts are the same in every build
    for (auto& v : g) {
        x += 0x9E3779B97F4A7C15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        v = z ^ (z >> 31);
    }
    return g;
}
constexpr std::array<uint64_t, 256> kGear = make_gear();

// Where the content-defined chunk of s that starts at `start` ends.
size_t chunk_end(std::string_view s, size_t start) {
    const auto* p = reinterpret_cast<const uint8_t*>(s.data());
    const size_t last = std::min(s.size(), start + kMaxChunk);
    uint64_t h = 0;
    for (size_t i = start; i < last; ++i) {
        h = (h << 1) + kGear[p[i]];
        if (i + 1 - start >= kMinChunk && (h & kCutMask) == 0) return i + 1;
    }
    return last;
}

// Calls fn(offset, length) for each content-defined chunk of s, in order.
template <class Fn>
void for_each_chunk(std::string_view s, Fn fn) {
    for (size_t start = 0; start < s.size();) {
        const size_t end = chunk_end(s, start);
        fn(start, end - start);
        start = end;
    }
}

// How many bytes a and b have in common from their starts.
size_t common_length(std::string_view a, std::string_view b) {
    const size_t n = std::min(a.size(), b.size());
    size_t i = 0;
    constexpr size_t kBlock = 256;
    while (i + kBlock <= n && std::memcmp(a.data() + i, b.data() + i, kBlock) == 0) i += kBlock;
    while (i < n && a[i] == b[i]) ++i;
    return i;
}

// (Equal keys are compared byte for byte before a chunk is shared.)
uint64_t chunk_key(const char* p, size_t n) { return (uint64_t{crc32c(p, n)} << 32) ^ n; }

}  // namespace

uint64_t checkpoint_state_limit(uint64_t source_bytes) { return 4 * source_bytes + (uint64_t{1} << 20); }

CheckpointPoolWriter::CheckpointPoolWriter(size_t n_layers) : layers_(n_layers) {}

void CheckpointPoolWriter::set_live(size_t layer, std::string_view live) { layers_.at(layer).live = live; }

std::string_view CheckpointPoolWriter::Layer::at(const Piece& p) const {
    return p.offset < live.size() ? live.substr(p.offset, p.len) : std::string_view(pool).substr(p.offset - live.size(), p.len);
}

void CheckpointPoolWriter::add_chunks(Layer& l, uint64_t base, std::string_view bytes) {
    for_each_chunk(bytes, [&](size_t at, size_t n) {
        l.index.try_emplace(chunk_key(bytes.data() + at, n), Piece{base + at, static_cast<uint32_t>(n)});
    });
}

void CheckpointPoolWriter::encode(size_t layer, std::string_view state, std::string& out) {
    if (state.empty()) return;
    Layer& l = layers_.at(layer);
    if (!l.indexed) {
        l.index.reserve(l.live.size() / 256 + 64);
        add_chunks(l, 0, l.live);
        l.indexed = true;
    }
    std::vector<Piece> pieces;
    auto push = [&](Piece p) {
        if (!pieces.empty() && pieces.back().offset + pieces.back().len == p.offset &&
            uint64_t{pieces.back().len} + p.len <= UINT32_MAX)
            pieces.back().len += p.len;
        else
            pieces.push_back(p);
    };
    // Chunks the source already holds become pieces of it, extended for as long as the bytes
    // after them agree too (a window's run of tokens matches for thousands of chunks, compared
    // at memcmp speed instead of hashed); the others go to the pool (and the index, for the
    // next checkpoint).
    for (size_t at = 0; at < state.size();) {
        const size_t n = chunk_end(state, at) - at;
        const std::string_view chunk = state.substr(at, n);
        const uint64_t key = chunk_key(chunk.data(), n);
        const auto it = l.index.find(key);
        if (it != l.index.end() && l.at(it->second) == chunk) {
            const Piece& found = it->second;
            const bool live = found.offset < l.live.size();
            const std::string_view region = live ? l.live : std::string_view(l.pool);
            const uint64_t in_region = live ? found.offset : found.offset - l.live.size();
            const size_t more = common_length(state.substr(at + n), region.substr(static_cast<size_t>(in_region) + n));
            for (size_t len = n + more, done = 0; done < len;) {  // (pieces hold at most 4 GiB)
                const size_t k = std::min<size_t>(len - done, UINT32_MAX);
                push({found.offset + done, static_cast<uint32_t>(k)});
                done += k;
            }
            at += n + more;
            continue;
        }
        const Piece fresh{l.size(), static_cast<uint32_t>(n)};
        l.pool.append(chunk);
        l.index.try_emplace(key, fresh);
        push(fresh);
        at += n;
    }
    if (state.size() > checkpoint_state_limit(l.size())) {  // (repeats itself a lot: stored whole)
        pieces.clear();
        for (size_t at = 0; at < state.size(); at += UINT32_MAX) {
            const size_t n = std::min<size_t>(UINT32_MAX, state.size() - at);
            pieces.push_back({l.size(), static_cast<uint32_t>(n)});
            l.pool.append(state.substr(at, n));
        }
    }
    ByteWriter w(out);
    w.put<uint32_t>(static_cast<uint32_t>(pieces.size()));
    for (const Piece& p : pieces) {
        w.put<uint64_t>(p.offset);
        w.put<uint32_t>(p.len);
    }
}

std::string CheckpointPoolWriter::pool_payload() const {
    std::string out;
    size_t total = 4;
    for (const Layer& l : layers_) total += 8 + l.pool.size();
    out.reserve(total);
    ByteWriter w(out);
    w.put<uint32_t>(static_cast<uint32_t>(layers_.size()));
    for (const Layer& l : layers_) {
        w.put<uint64_t>(l.pool.size());
        w.bytes(l.pool.data(), l.pool.size());
    }
    return out;
}

std::string decode_checkpoint_state(std::string_view encoding, std::string_view live, std::string_view pool,
                                    const std::string& what) {
    if (encoding.empty()) return {};
    ByteReader r(encoding, what);
    const uint32_t n = r.get<uint32_t>("piece count");
    if (n == 0 || uint64_t{n} * 12 != r.remaining()) r.fail("bad piece count " + std::to_string(n));
    const uint64_t source = live.size() + pool.size();
    // Checked in full before anything is allocated.
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; ++i) {
        const uint64_t off = r.get<uint64_t>("piece offset");
        const uint32_t len = r.get<uint32_t>("piece length");
        if (len == 0 || off > source || len > source - off)
            r.fail("piece " + std::to_string(i) + " lies outside the layer's stored bytes");
        total += len;
        if (total > checkpoint_state_limit(source)) r.fail("its pieces add up to an implausible size");
    }
    std::string out;
    out.reserve(static_cast<size_t>(total));
    ByteReader again(encoding, what);
    again.get<uint32_t>("piece count");
    for (uint32_t i = 0; i < n; ++i) {
        uint64_t off = again.get<uint64_t>("piece offset");
        uint64_t len = again.get<uint32_t>("piece length");
        if (off < live.size()) {  // (a piece may run from the live section on into the pool)
            const uint64_t k = std::min<uint64_t>(len, live.size() - off);
            out.append(live.substr(static_cast<size_t>(off), static_cast<size_t>(k)));
            off += k;
            len -= k;
        }
        if (len > 0) out.append(pool.substr(static_cast<size_t>(off - live.size()), static_cast<size_t>(len)));
    }
    return out;
}

}  // namespace kvchat
