#pragma once
// Zero-initialised bytes that grow in place. Large cache layers live here instead of a
// std::vector: growing remaps pages instead of copying them, new bytes are zero pages the kernel
// hands out on first touch instead of a memset over capacity nobody has used yet, and arenas of
// 512 KiB or more are whole 2 MiB-aligned stretches that ask for transparent huge pages (fewer
// TLB misses when a decode step reads every layer, fewer faults when a snapshot fills a layer).
// Under AddressSanitizer it is a std::vector, so overflows are still reported.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvchat {

class GrowableArena {
public:
    GrowableArena() = default;
    ~GrowableArena();
    GrowableArena(const GrowableArena&) = delete;
    GrowableArena& operator=(const GrowableArena&) = delete;

    uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    // Bytes past the old size read as zero. Throws std::bad_alloc when memory cannot be had.
    void resize(size_t n);
    // Replaces the contents with `len` bytes of the open file `fd` at `offset` (a multiple of the
    // page size), mapped copy-on-write instead of read, followed by zeros up to `capacity`. The
    // file must not change while mapped (snapshots are replaced by rename, never rewritten).
    // False, with nothing changed, when that cannot be done here; the caller then copies.
    bool adopt_file(int fd, uint64_t offset, size_t len, size_t capacity);

private:
#if defined(__SANITIZE_ADDRESS__)
    std::vector<uint8_t> bytes_;
#else
    size_t mapped_ = 0;  // bytes mapped (whole pages)
    bool split_ = false; // starts with a file mapping: growth copies instead of remapping
#endif
    uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace kvchat
