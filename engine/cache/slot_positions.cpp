#include "engine/cache/slot_positions.h"

#include <algorithm>

namespace kvchat {

void SlotPositions::grow(int64_t capacity) {
    if (capacity > this->capacity()) pos_.resize(static_cast<size_t>(capacity), kEmpty);
}

bool SlotPositions::put(int64_t i, int32_t p) {
    int32_t& slot = pos_[static_cast<size_t>(i)];
    const bool overwrote = slot != kEmpty;
    slot = p;
    used_ = std::max(used_, i + 1);
    return overwrote;
}

int64_t SlotPositions::held() const {
    if (ordered_) return used_;
    return std::count_if(pos_.begin(), pos_.begin() + used_, [](int32_t p) { return p != kEmpty; });
}

int32_t SlotPositions::oldest(int32_t from) const {
    if (ordered_) return used_ > 0 && pos_[0] >= from ? pos_[0] : kEmpty;
    int32_t o = kEmpty;
    for (int64_t i = 0; i < used_; ++i)
        if (pos_[static_cast<size_t>(i)] >= from) o = std::min(o, pos_[static_cast<size_t>(i)]);
    return o;
}

void SlotPositions::crop(int32_t n) {
    if (ordered_) {
        // Positions ascend with the slots: cut at the first one >= n.
        used_ = std::lower_bound(pos_.begin(), pos_.begin() + used_, n) - pos_.begin();
        std::fill(pos_.begin() + used_, pos_.end(), kEmpty);
    } else {
        for (int32_t& p : pos_)
            if (p != kEmpty && p >= n) p = kEmpty;
    }
}

void SlotPositions::clear() {
    std::fill(pos_.begin(), pos_.end(), kEmpty);
    used_ = 0;
}

bool SlotPositions::valid(const int32_t* pos, int64_t n, int32_t next) const {
    if (n < 0 || (ordered_ && n > next)) return false;
    for (int64_t i = 0; i < n; ++i) {
        const int32_t p = pos[i];
        const bool ok = ordered_ ? p == i : p == kEmpty || (p >= 0 && p < next && slot_for(p) == i);
        if (!ok) return false;
    }
    return true;
}

void SlotPositions::assign(const int32_t* pos, int64_t n) {
    std::fill(pos_.begin(), pos_.end(), kEmpty);
    std::copy(pos, pos + n, pos_.begin());
    used_ = n;
}

}  // namespace kvchat
