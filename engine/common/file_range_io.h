#pragma once
// Whole reads and writes of a byte range of an open file, retried over short transfers and
// EINTR: what the backends' spill-file moves need. Both return 0 or an errno value.
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvchat {

// n bytes at `offset` into dst; bytes past the end of the file read as zero (reserved, never written).
inline int read_file_range(int fd, int64_t offset, void* dst, size_t n) {
    auto* out = static_cast<uint8_t*>(dst);
    size_t done = 0;
    while (done < n) {
        const ssize_t r = ::pread(fd, out + done, n - done, offset + static_cast<int64_t>(done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return errno;
        if (r == 0) {
            std::memset(out + done, 0, n - done);
            break;
        }
        done += static_cast<size_t>(r);
    }
    return 0;
}

// n bytes of src at `offset`; *written: the bytes written (before an error, if any).
inline int write_file_range(int fd, int64_t offset, const void* src, size_t n, size_t* written) {
    const auto* in = static_cast<const uint8_t*>(src);
    size_t done = 0;
    while (done < n) {
        const ssize_t w = ::pwrite(fd, in + done, n - done, offset + static_cast<int64_t>(done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            // A short write followed by an error, or no progress at all.
            *written = done;
            return w < 0 ? errno : ENOSPC;
        }
        done += static_cast<size_t>(w);
    }
    *written = done;
    return 0;
}

}  // namespace kvchat
