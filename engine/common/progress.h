#pragma once
// Progress and cancellation of a long step (loading a model or a cache, prefilling, converting a
// cache, saving a prefix). The step reports what it has done and checks the flag between units
// of work; a cancelled step throws kvchat::Cancelled and leaves what it worked on as it was.
#include "engine/error.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <string_view>

namespace kvchat {

struct Progress {
    // task: "Loading model", "Loading cache", "Prefilling", "Converting cache", "Saving prefix"...
    std::function<void(std::string_view task, int64_t done, int64_t total)> report;
    const std::atomic<bool>* cancel = nullptr;  // set from any thread

    void tell(std::string_view task, int64_t done, int64_t total) const {
        if (report) report(task, done, total);
    }
    bool cancelled() const { return cancel && cancel->load(std::memory_order_relaxed); }
    // Throws kvchat::Cancelled naming the task when the flag is set.
    void check(std::string_view task) const {
        if (cancelled()) throw Cancelled(std::string(task) + " was cancelled");
    }
};

}  // namespace kvchat
