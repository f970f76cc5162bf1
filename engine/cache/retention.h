#pragma once
// The retention axis of a cache layer: which tokens it keeps. All of them, a ring of the last
// `window`, or `sinks` first tokens plus a ring of the most recent window - sinks. It decides
// where a position's slot is (through SlotPositions), what a query sees, which tokens of a chunk
// are stored at all, and what a crop can still reach; it holds no tokens itself.
#include "engine/cache/cache_spec.h"
#include "engine/cache/slot_positions.h"

#include <cstdint>
#include <string>

namespace kvchat {

class Retention {
public:
    // model_window: the model's own sliding window for the layer (0: global), the mask of a layer
    // that keeps every token.
    Retention(RetentionKind kind, int window, int sinks, int model_window);

    RetentionKind kind() const { return kind_; }
    bool keeps_all() const { return kind_ == RetentionKind::All; }
    // Tokens kept including the sinks (SlidingWindow, Sink).
    int window() const { return window_; }
    int sinks() const { return kind_ == RetentionKind::Sink ? sinks_ : 0; }
    // The mask window for non-sink tokens (0: none), and the end of the sink positions.
    int recent() const { return recent_; }
    int sink_end() const { return sink_end_; }

    // Where the full-precision slots put positions: in order when they keep every token,
    // otherwise sinks then a ring (a quantized layer's slots hold only its sinks).
    SlotPositions slot_positions(bool quantized) const;
    // A chunk ending at position `last` needs the tokens from here on (and the sinks).
    int32_t keep_from(int32_t last) const { return last + 1 - recent_; }
    // Whether a ring skips storing position p of a chunk ending at `last`: it would be
    // overwritten in the same chunk.
    bool skips(int32_t p, int32_t last) const { return !keeps_all() && p >= sink_end_ && p < keep_from(last); }
    // Whether a cache of `length` tokens still needs position p.
    bool needed(int64_t p, int64_t length) const { return keeps_all() || p < sink_end_ || p >= length - recent_ + 1; }
    // Whether after a crop to n (with positions below `next` seen) the tokens held still cover
    // what a query at n sees; oldest: the oldest non-sink position held.
    bool can_crop_to(int64_t n, int32_t next, int32_t oldest) const;
    // Sinks are seen at their rank in the cache (StreamingLLM): a query that has filled the window
    // sits at rank window - 1. Whether a chunk ending at `last` needs queries at ranks, and the rank.
    bool ranks_queries(int32_t last) const { return sink_end_ > 0 && last >= window_; }
    int32_t rank(int32_t p) const { return p < window_ - 1 ? p : window_ - 1; }

    // For layouts and the inspector: "all" / "window window=W" / "sink window=W sinks=S", and
    // ", ring of R" / ", S sinks + ring of R" ("" when keeping all).
    std::string layout() const;
    std::string describe() const;

private:
    RetentionKind kind_;
    int window_, sinks_;
    int recent_ = 0;
    int sink_end_ = 0;
};

}  // namespace kvchat
