#include "engine/common/regular_file.h"

#include "engine/error.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace kvchat {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& reason) {
    throw Error("'" + path + "': " + reason);
}

std::string not_regular(unsigned mode) { return "not a regular file (it is " + describe_file_type(mode) + ")"; }

}  // namespace

std::string describe_file_type(unsigned mode) {
    switch (mode & S_IFMT) {
        case S_IFREG: return "a regular file";
        case S_IFDIR: return "a directory";
        case S_IFIFO: return "a FIFO";
        case S_IFCHR: return "a character device";
        case S_IFBLK: return "a block device";
        case S_IFSOCK: return "a socket";
        case S_IFLNK: return "a symbolic link";
    }
    return "not a file";
}

RegularFile RegularFile::open(const std::string& path) {
    // stat first, so that a device is refused without being opened at all; fstat after opening,
    // so that what was checked is what is read even if the path is replaced in between.
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) fail(path, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail(path, not_regular(st.st_mode));
    // O_NONBLOCK: should a FIFO appear at the path after the stat, open() returns at once.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) fail(path, std::strerror(errno));
    RegularFile f;
    f.path_ = path;
    f.fd_ = fd;
    if (::fstat(fd, &st) != 0) fail(path, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail(path, not_regular(st.st_mode));
    // Regular files never block; clearing the flag keeps later reads ordinary.
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    f.size_ = static_cast<uint64_t>(st.st_size);
    return f;
}

RegularFile::~RegularFile() {
    if (fd_ >= 0) ::close(fd_);
}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(std::exchange(other.size_, 0)) {}

RegularFile& RegularFile::operator=(RegularFile&& other) noexcept {
    if (this != &other) {
        if (fd_ >= 0) ::close(fd_);
        path_ = std::move(other.path_);
        fd_ = std::exchange(other.fd_, -1);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

int RegularFile::release() { return std::exchange(fd_, -1); }

size_t RegularFile::read_at(uint64_t offset, void* out, size_t n) const {
    size_t done = 0;
    while (done < n) {
        const ssize_t got = ::pread(fd_, static_cast<char*>(out) + done, n - done, static_cast<off_t>(offset + done));
        if (got < 0) {
            if (errno == EINTR) continue;
            fail(path_, std::strerror(errno));
        }
        if (got == 0) break;
        done += static_cast<size_t>(got);
    }
    return done;
}

std::string RegularFile::read_all(size_t max_bytes) const {
    const std::string limit = "the limit of " + std::to_string(max_bytes) + " bytes";
    if (size_ > max_bytes) fail(path_, "it is " + std::to_string(size_) + " bytes, more than " + limit);
    if (size_ == 0) {
        // Kernel files (/proc, /sys) report size 0 yet hold text: read them, to the limit.
        std::string out;
        char buf[1 << 16];
        for (uint64_t at = 0;;) {
            const size_t got = read_at(at, buf, sizeof buf);
            if (got == 0) return out;
            if (out.size() + got > max_bytes) fail(path_, "it holds more than " + limit);
            out.append(buf, got);
            at += got;
        }
    }
    std::string out(static_cast<size_t>(size_), '\0');
    // A file that shrank while being read gives what it still holds; one that grew, its first size_ bytes.
    out.resize(read_at(0, out.data(), out.size()));
    return out;
}

bool regular_file_exists(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        // ENOTDIR: a parent is a file, so nothing is there (creating it then names that parent).
        if (errno == ENOENT || errno == ENOTDIR) {
            // A dangling symbolic link is something the user made: say so rather than create its target.
            if (::lstat(path.c_str(), &st) == 0) fail(path, "a symbolic link to nothing");
            return false;
        }
        fail(path, std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) fail(path, not_regular(st.st_mode));
    return true;
}

}  // namespace kvchat
