#pragma once
// The placement axis of a cache layer: where its bytes live between uses. Resident memory keeps
// them in the backend's KV memory all the time; offloaded memory keeps them in an OffloadTier,
// which lends them in a fast buffer while the layer is in use. Either way the bytes are valid
// from open() to close(), and only they move: the layer never knows which it has.
#include "engine/cache/offload_tier.h"

#include <cstddef>
#include <cstdint>

namespace kvchat {

class LayerMemory {
public:
    virtual ~LayerMemory() = default;
    // Sets aside `capacity` bytes when the layer is made (fixed: its whole preallocated capacity).
    virtual void start(size_t capacity, bool fixed) = 0;
    // The layer's bytes [0, used) in memory of at least `capacity` bytes, until close().
    virtual uint8_t* open(size_t used, size_t capacity) = 0;
    // More room while open, keeping the content.
    virtual uint8_t* grow(size_t capacity) = 0;
    // Ends a use: the layer now has `used` bytes, of which [lo, hi) changed.
    virtual void close(size_t used, size_t lo, size_t hi) = 0;
    // Makes sure `bytes` will fit (the disk of an offloaded layer, reserved now); throws
    // kvchat::Error when they cannot.
    virtual void reserve(size_t bytes) = 0;
    // The layer shrank to `used` bytes without a use (a crop).
    virtual void shrink(size_t used) = 0;
    // Maps `len` bytes of a snapshot file in place of a copy, sized to `capacity` (KvMemory::adopt_file);
    // false when it cannot.
    virtual bool adopt_file(int fd, uint64_t offset, size_t len, size_t capacity) = 0;
    virtual bool offloaded() const = 0;
    // The traffic of the slow tier (offloaded memory only).
    virtual const TierTraffic* traffic() const = 0;
};

}  // namespace kvchat
