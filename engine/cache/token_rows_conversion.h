#pragma once
// Conversion between strategies, one layer at a time: a layer's tokens read out as TokenRows
// (f32, in position order), whether another layer can be rebuilt from such rows alone, and the
// rebuild. Rows move in runs: one download per run of stored records and one upload per run of
// slots they go to (a bounded number of records at a time, so the f32 rows and the records in
// between stay in cache), and a quantized layer quantizes its blocks from records staged in its
// backend's memory, as its append does.
#include "engine/cache/cache_layer.h"
#include "engine/cache/layer_contents.h"
#include "engine/cache/retention.h"
#include "engine/compute/backend.h"

namespace kvchat {

struct LayerConfig;

class TokenRowsConversion {
public:
    TokenRowsConversion(LayerContents& contents, const LayerConfig& config, const Retention& retention, Backend& backend,
                        int64_t kv_dim);

    // Every token the layer holds, exact ones in `form`.
    void export_to(TokenRows& rows, TokenRows::Form form) const;
    // Whether the layer can be rebuilt from `rows` for a cache of `length` tokens (CacheLayer::can_import).
    bool can_import(const TokenRows& rows, int64_t length) const;
    // Replaces the contents with what adding positions [0, length) of `rows` one by one would
    // leave. The caller has checked can_import() and the room.
    void import(const TokenRows& rows, int64_t length);

private:
    // The first row import may put in the residual (see import_from in the .cpp).
    size_t residual_from(const TokenRows& rows, int64_t length) const;
    void import_full(const TokenRows& rows, int64_t length);
    void import_quantized_contiguous(const TokenRows& rows, int64_t length);
    void import_by_store(const TokenRows& rows, int64_t length);
    // Records (key row, then value row, in the layer's dtype) of rows [first, first + n) at host.
    void records_of(const TokenRows& rows, size_t first, int64_t n, uint8_t* host) const;
    // Whether exact row i survives storage in the layer's dtype unchanged.
    bool representable(const TokenRows& rows, size_t i) const;

    LayerContents& c_;
    const LayerConfig& cfg_;
    const Retention& retention_;
    Backend& backend_;
    int64_t kv_dim_;
};

}  // namespace kvchat
