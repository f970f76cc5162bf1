#include "engine/cache/retention.h"

#include <algorithm>

namespace kvchat {

Retention::Retention(RetentionKind kind, int window, int sinks, int model_window)
    : kind_(kind), window_(window), sinks_(sinks) {
    switch (kind_) {
        case RetentionKind::All: recent_ = model_window; break;
        case RetentionKind::SlidingWindow: recent_ = window_; break;
        case RetentionKind::Sink:
            recent_ = window_ - sinks_;
            sink_end_ = sinks_;
            break;
    }
}

SlotPositions Retention::slot_positions(bool quantized) const {
    if (!quantized && keeps_all()) return SlotPositions::in_order();
    return SlotPositions::ring(sinks(), kind_ == RetentionKind::Sink ? window_ - sinks_ : window_);
}

bool Retention::can_crop_to(int64_t n, int32_t next, int32_t oldest) const {
    if (n >= next || keeps_all()) return true;
    // A query at n sees the sinks and positions from n - recent + 1 on.
    const int64_t need_lo = std::max<int64_t>(sink_end_, n - recent_ + 1);
    if (need_lo >= n) return true;
    return oldest <= need_lo;
}

std::string Retention::layout() const {
    std::string s = keeps_all() ? "all" : kind_ == RetentionKind::SlidingWindow ? "window" : "sink";
    if (!keeps_all()) s += " window=" + std::to_string(window_);
    if (kind_ == RetentionKind::Sink) s += " sinks=" + std::to_string(sinks_);
    return s;
}

std::string Retention::describe() const {
    if (kind_ == RetentionKind::SlidingWindow) return ", ring of " + std::to_string(window_);
    if (kind_ == RetentionKind::Sink) return ", " + std::to_string(sinks_) + " sinks + ring of " + std::to_string(window_ - sinks_);
    return "";
}

}  // namespace kvchat
