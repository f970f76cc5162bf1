#pragma once
// Live conversion of a cache to another strategy, in place and mid-conversation. Tokens the
// target can keep are carried over (dynamic -> static, offloaded, quantized, a window; a layer
// laid out alike, e.g. quantized -> quantized+offloaded, moves verbatim); when the target needs
// tokens the cache no longer has (sink -> dynamic, a window -> global layers that keep all) or
// needs them more precisely than it holds them (quantized -> full precision, more bits, a smaller
// group, a larger residual) the cache is rebuilt by re-prefilling its token history through the
// model. Fewer bits or a larger group quantize the dequantized values again (docs/cache.md). A
// failure (a full slow-tier disk included) or cancellation leaves the old cache as it was.
#include "engine/cache/cache.h"

#include <atomic>
#include <functional>
#include <string>
#include <vector>

namespace kvchat {

struct ConvertOptions {
    // Runs `tokens` through the model into `cache` (after what it holds), e.g.
    // model.forward(backend, cache, tokens.data(), n, Logits::None, scratch).
    std::function<void(Cache& cache, const std::vector<int32_t>& tokens)> reprefill;
    std::function<void(int64_t done, int64_t total)> progress;  // tokens re-prefilled so far
    const std::atomic<bool>* cancel = nullptr;
    int64_t chunk = 256;  // tokens per re-prefill call (progress and cancellation granularity)
};

struct ConvertResult {
    bool rebuilt = false;          // re-prefilled from the token history
    int64_t reprefilled_tokens = 0;
    double ms = 0.0;
};

// Throws kvchat::Error (bad spec, a max_len too small for the tokens held, no reprefill for a
// conversion that needs one, "cancelled"); the cache is then unchanged.
ConvertResult convert(Cache& cache, const CacheSpec& target, const ConvertOptions& options = {});
ConvertResult convert(Cache& cache, const std::string& target, const ConvertOptions& options = {});

}  // namespace kvchat
