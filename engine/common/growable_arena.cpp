#include "engine/common/growable_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <new>

namespace kvchat {

#if defined(__SANITIZE_ADDRESS__)

GrowableArena::~GrowableArena() = default;

void GrowableArena::resize(size_t n) {
    bytes_.resize(n);
    data_ = bytes_.data();
    size_ = n;
}

bool GrowableArena::adopt_file(int, uint64_t, size_t, size_t) { return false; }

#else

namespace {
constexpr size_t kHuge = size_t{2} << 20;
// From this size on an arena is kept in whole 2 MiB pages from a 2 MiB boundary, so that the
// kernel can back it with transparent huge pages. A decode step reads every layer's keys and
// values: in 4 KiB pages SmolLM2's 30 layers at 640 tokens are 3,600 pages, more than a Zen 4's
// second-level TLB holds, and every step walked the page tables again. At most 4x the bytes at
// the threshold, the doubling's own slack above it.
constexpr size_t kHugeFrom = size_t{512} << 10;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// A fresh zero mapping of `bytes` (a multiple of kHuge) from a kHuge boundary: mmap promises only
// page alignment (kernels before 6.7 do not align large anonymous mappings).
uint8_t* map_huge(size_t bytes) {
    void* raw = ::mmap(nullptr, bytes + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    auto* r = static_cast<uint8_t*>(raw);
    auto* p = reinterpret_cast<uint8_t*>(round_up(reinterpret_cast<uintptr_t>(r), kHuge));
    if (p > r) ::munmap(r, static_cast<size_t>(p - r));
    ::munmap(p + bytes, static_cast<size_t>(r + kHuge - p));  // (r is page-aligned: p < r + kHuge)
    ::madvise(p, bytes, MADV_HUGEPAGE);  // advice only: without THP it is ignored
    return p;
}
}  // namespace

GrowableArena::~GrowableArena() {
    if (data_) ::munmap(data_, mapped_);
}

void GrowableArena::resize(size_t n) {
    if (n <= mapped_) {
        // Shrinking keeps the mapping; what is given up is zeroed so a later growth reads zeros.
        if (n < size_) std::memset(data_ + n, 0, size_ - n);
        size_ = n;
        return;
    }
    if (n >= kHugeFrom) {
        const size_t want = round_up(n, kHuge);
        uint8_t* p = map_huge(want);
        // Already in huge pages: the small-page mappings stay under kHugeFrom, a file's is split_.
        const bool huge = data_ && !split_ && mapped_ >= kHuge;
        if (huge) {
            // Huge pages move with their page tables to the new mapping's start.
            if (::mremap(data_, mapped_, mapped_, MREMAP_MAYMOVE | MREMAP_FIXED, p) == MAP_FAILED) {
                ::munmap(p, want);
                throw std::bad_alloc();
            }
        } else if (data_) {
            // Small pages (or a file's) moved there would stay small: copied once.
            std::memcpy(p, data_, size_);
            ::munmap(data_, mapped_);
        }
        data_ = p;
        mapped_ = want;
        size_ = n;
        split_ = false;
        return;
    }
    static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t want = round_up(n, page);
    void* p;
    if (split_) {
        // A file-backed start cannot grow by remapping (that would map more of the file): copy once.
        p = ::mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        std::memcpy(p, data_, size_);
        ::munmap(data_, mapped_);
        split_ = false;
    } else {
        p = data_ ? ::mremap(data_, mapped_, want, MREMAP_MAYMOVE)
                  : ::mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
    }
    data_ = static_cast<uint8_t*>(p);
    mapped_ = want;
    size_ = n;
}

bool GrowableArena::adopt_file(int fd, uint64_t offset, size_t len, size_t capacity) {
    static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    if (fd < 0 || len == 0 || offset % page != 0 || capacity < len) return false;
    const size_t want = round_up(capacity, capacity >= kHuge ? kHuge : page);
    const size_t file_part = round_up(len, page);
    void* p = ::mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    if (::mmap(p, file_part, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, static_cast<off_t>(offset)) == MAP_FAILED) {
        ::munmap(p, want);
        return false;
    }
#ifdef MADV_POPULATE_READ
    ::madvise(p, file_part, MADV_POPULATE_READ);  // (advice; older kernels fault the pages on use)
#endif
    if (data_) ::munmap(data_, mapped_);
    data_ = static_cast<uint8_t*>(p);
    mapped_ = want;
    size_ = capacity;
    split_ = true;  // (also without an anonymous tail: growing must not map more of the file)
    // The last file page continues with whatever follows in the file: zero it past the data.
    if (file_part > len) std::memset(data_ + len, 0, file_part - len);
    return true;
}

#endif

}  // namespace kvchat
