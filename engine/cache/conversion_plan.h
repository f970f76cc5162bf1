#pragma once
// What converting a cache to another strategy will do, worked out from the cache's own layers
// without changing anything: lossless, lossy (tokens that will be quantized or evicted), or a
// rebuild of N tokens through the model; and the KV bytes before and after. The strategy panel
// shows it before Apply, and a conversation's strategy switch returns it as what happened.
#include "engine/cache/cache.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvchat {

// One layer's part of a conversion: how it gets its tokens and what it holds afterwards (the
// figures its telemetry will show once the conversion is done).
struct LayerConversion {
    enum class Mode {
        Verbatim,  // laid out alike (only the placement differs): its state moves as it is
        Imported,  // takes the tokens it needs from the old layer
        Rebuilt,   // filled again through the model
    };
    Mode mode = Mode::Verbatim;
    int64_t tokens_before = 0, tokens_after = 0;   // tokens held
    int64_t tokens_quantized = 0;    // exact now, quantized after
    int64_t tokens_requantized = 0;  // quantized now, quantized again more coarsely (fewer bits, larger group)
    int64_t tokens_evicted = 0;      // held now, not after
    int64_t tokens_restored = 0;     // not held now, held after (a rebuild brings them back)
    int64_t quantized_after = 0;     // LayerTelemetry::quantized_tokens after
    int64_t evicted_after = 0;       // LayerTelemetry::evicted after
    int64_t bytes_before = 0, bytes_after = 0;  // held, fast + slow tier
    // Where the evicted and the newly quantized tokens lie: their first and last positions
    // (-1: none).
    int64_t evicted_first = -1, evicted_last = -1;
    int64_t quantized_first = -1, quantized_last = -1;
};

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
    // Also the largest over the layers: quantized now and quantized again into a coarser format
    // (lossy too), and tokens a rebuild brings back that a window or sinks had dropped.
    int64_t tokens_requantized = 0;
    int64_t tokens_restored = 0;
    std::vector<LayerConversion> layers;  // empty when Unchanged
    // Over all layers, the first and last position of a token some layer evicts, or newly
    // quantizes (-1: none): with message_starts, which messages lose what.
    int64_t evicted_first = -1, evicted_last = -1;
    int64_t quantized_first = -1, quantized_last = -1;
    // When the cache is a conversation's (ChatSession::plan_switch fills it): the position where
    // each of its messages begins, in order; empty otherwise.
    std::vector<int64_t> message_starts;
};

// The messages (0-based indices into message_starts) holding positions [first, last]; a position
// before the first message belongs to it. {-1, -1} when there are no messages or no positions.
std::pair<int64_t, int64_t> messages_spanning(const std::vector<int64_t>& message_starts, int64_t first, int64_t last);

std::string_view conversion_kind_name(ConversionPlan::Kind kind);  // "unchanged", "lossless", ...
std::string_view layer_conversion_mode_name(LayerConversion::Mode mode);  // "verbatim", "imported", "rebuilt"

// Throws kvchat::Error naming the bad parameter when `target` is not a valid spec, or when the
// target cannot hold the cache's tokens (a max_len too small). prefill_tok_s: the model's
// measured prefill speed for the estimate (0: no estimate).
//
// The plan makes the same per-layer decisions as convert() (convert.h) and carries them out in a
// scratch cache of the target's layout (resident, whatever the target's placement), so its
// figures are what the converted cache will report; the scratch memory is freed on return. It
// costs about what the conversion's carry-over costs, and never runs the model.
ConversionPlan plan_conversion(const Cache& cache, const CacheSpec& target, double prefill_tok_s = 0);
ConversionPlan plan_conversion(const Cache& cache, const std::string& target, double prefill_tok_s = 0);

}  // namespace kvchat
