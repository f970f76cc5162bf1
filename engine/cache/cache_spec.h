#pragma once
// Cache strategy specs as the user writes them ("quantized:nbits=4+offloaded", "sink:window=256,
// sinks=4"): parsed into the four axes, validated (errors name the part and the parameter), and
// printed back in one canonical form that the store and snapshots keep.
#include "engine/compute/kv_dtype.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvchat {

// Which tokens a strategy keeps on the model's global layers (its sliding layers always keep
// the model's window).
enum class RetentionKind {
    All,            // dynamic, static, offloaded, quantized, hybrid
    SlidingWindow,  // the last `window` tokens on every layer
    Sink,           // the first `sinks` tokens plus the most recent window - sinks
};

// The part of a spec that chooses what the cache keeps and how it is laid out (the other parts,
// quantized and offloaded, combine with any of them).
enum class CacheBase { Dynamic, Static, SlidingWindow, Sink, Hybrid };
// "dynamic", "static", "sliding_window", "sink", "hybrid": the base's name in the spec grammar.
std::string_view cache_base_name(CacheBase base);

struct CacheSpec {
    CacheBase base = CacheBase::Dynamic;
    RetentionKind retention = RetentionKind::All;
    bool fixed = false;        // storage: preallocated (static, offloaded_static, hybrid with max_len)
    int64_t max_len = 0;       // fixed: most tokens the cache may hold
    int window = 0;            // sliding_window / sink
    int sinks = 0;             // sink
    bool hybrid = false;       // sliding layers as fixed ring buffers
    // precision
    // Full-precision keys and values (and a quantized cache's residual and sinks): dtype=f16,
    // bf16 or f32 on any part; unset: the model's own (f16 for GGUF models, as llama.cpp).
    std::optional<KvDtype> dtype;
    int nbits = 0;             // 0: full precision; 2, 4 or 8: KIVI-style quantized
    int residual = 128;
    int group = 64;
    // placement
    bool offloaded = false;
    std::string offload_dir;   // slow-tier directory; empty: $TMPDIR or /tmp

    // The bounded strategies a conversation that outgrew its context switches to, with every
    // field that goes with them set (nothing else: full precision, resident).
    static CacheSpec sliding_window(int window);
    static CacheSpec sink(int window, int sinks);

    bool lossless() const { return nbits == 0 && retention == RetentionKind::All; }
    bool operator==(const CacheSpec&) const = default;
};

// Parses a spec; throws kvchat::Error naming the unknown strategy, the unknown, missing or
// invalid parameter, or the parts that cannot be combined.
CacheSpec parse_cache_spec(const std::string& text);
// The canonical text of a spec: parse_cache_spec(to_string(s)) == s.
std::string to_string(const CacheSpec& spec);
// Splits a comma-separated list of specs ("dynamic,quantized:nbits=4,residual=64,static:max_len=8")
// at the commas that start a new strategy rather than another parameter.
std::vector<std::string> split_spec_list(const std::string& text);

}  // namespace kvchat
