#pragma once
// What converting a cache to another strategy will do, worked out from the cache's own layers
// without changing anything: lossless, lossy (tokens that will be quantized or evicted), or a
// rebuild of N tokens through the model; and the KV bytes before and after. The strategy panel
// shows it before Apply, and a conversation's strategy switch returns it as what happened.
#include "engine/cache/cache.h"

#include <cstdint>
#include <string>

namespace kvchat {

struct ConversionPlan {
    enum class Kind {
        Unchanged,  // the target is the cache's own strategy
        Lossless,   // every token carried over exactly
        Lossy,      // tokens carried over, some quantized or evicted
        Rebuild,    // the target needs tokens (or precision) the cache no longer holds
    };
    Kind kind = Kind::Unchanged;
    std::string from_spec, to_spec;  // canonical specs
    int64_t tokens = 0;              // the cache's sequence length
    // Largest count over the layers (a global layer loses more to a window than a sliding one).
    int64_t tokens_quantized = 0;    // held in full precision now, quantized after
    int64_t tokens_evicted = 0;      // held now, dropped by the target's retention
    int64_t tokens_rebuilt = 0;      // re-prefilled through the model (Rebuild)
    double rebuild_ms_estimate = 0;  // tokens_rebuilt at the given prefill speed
    int64_t bytes_before = 0, bytes_after = 0;
    std::string summary;             // one sentence for the user
};

std::string_view conversion_kind_name(ConversionPlan::Kind kind);  // "unchanged", "lossless", ...

// Throws kvchat::Error naming the bad parameter when `target` is not a valid spec, or when the
// target cannot hold the cache's tokens (a max_len too small). prefill_tok_s: the model's
// measured prefill speed for the estimate (0: no estimate).
ConversionPlan plan_conversion(const Cache& cache, const std::string& target, double prefill_tok_s = 0);

}  // namespace kvchat
