#include "engine/common/atomic_file.h"

#include "engine/common/regular_file.h"
#include "engine/error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kvchat {

namespace {

std::string directory_of(const std::string& path) {
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

std::string file_name_of(const std::string& path) {
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
    if (path_.empty() || path_.back() == '/') throw Error("cannot write '" + path_ + "': not a file name");
    // A dot name hides the temporary file from casual listings; the random suffix keeps two
    // writers of the same target apart.
    std::string pattern = directory_of(path_) + "/." + file_name_of(path_) + ".tmp-XXXXXX";
    fd_ = mkostemp(pattern.data(), O_CLOEXEC);
    if (fd_ < 0) {
        const int err = errno;
        throw Error("cannot write '" + path_ + "': cannot create a temporary file in '" + directory_of(path_) +
                    "': " + std::strerror(err));
    }
    temp_path_ = std::move(pattern);
}

AtomicFile::~AtomicFile() {
    if (!committed_) discard();
}

void AtomicFile::discard() noexcept {
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
    }
    if (!temp_path_.empty()) {
        ::unlink(temp_path_.c_str());
        temp_path_.clear();
    }
}

void AtomicFile::fail(const std::string& what, int err) {
    discard();
    throw Error("cannot write '" + path_ + "': " + what + ": " + std::strerror(err));
}

void AtomicFile::write(const void* data, size_t size) {
    if (fd_ < 0) throw Error("cannot write '" + path_ + "': the file was already committed or discarded");
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
        const ssize_t n = ::write(fd_, p, size);
        if (n < 0) {
            if (errno == EINTR) continue;
            fail("write failed", errno);
        }
        p += n;
        size -= static_cast<size_t>(n);
    }
}

void AtomicFile::commit() {
    if (fd_ < 0) throw Error("cannot write '" + path_ + "': the file was already committed or discarded");
    if (::fsync(fd_) != 0) fail("flushing to disk failed", errno);
    const int fd = fd_;
    fd_ = -1;
    // close() can report a delayed write error (NFS); the file is then not trustworthy.
    if (::close(fd) != 0) fail("closing failed", errno);
    if (::rename(temp_path_.c_str(), path_.c_str()) != 0) fail("renaming the temporary file failed", errno);
    temp_path_.clear();
    committed_ = true;
    const std::string dir = directory_of(path_);
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        const int err = errno;
        throw Error("cannot write '" + path_ + "': opening its directory to flush it failed: " + std::strerror(err));
    }
    const int rc = ::fsync(dfd);
    const int err = errno;
    ::close(dfd);
    if (rc != 0) throw Error("cannot write '" + path_ + "': flushing its directory failed: " + std::strerror(err));
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
    AtomicFile file(path);
    file.write(bytes);
    file.commit();
}

std::string read_whole_file(const std::string& path, size_t max_bytes) {
    // RegularFile refuses FIFOs and devices without blocking and reads no more than the size the
    // file had when opened, so neither a FIFO nor /dev/zero under a snapshot's name can hang or
    // fill memory.
    try {
        return RegularFile::open(path).read_all(max_bytes);
    } catch (const Error& e) {
        throw Error(std::string("cannot read ") + e.what());
    }
}

}  // namespace kvchat
