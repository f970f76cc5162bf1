#include "engine/common/atomic_file.h"

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
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int err = errno;
        throw Error("cannot read '" + path + "': " + std::strerror(err));
    }
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        throw Error("cannot read '" + path + "': " + std::strerror(err));
    }
    if (S_ISDIR(st.st_mode)) throw Error("cannot read '" + path + "': it is a directory");
    const std::string limit = std::to_string(max_bytes) + " bytes";
    if (S_ISREG(st.st_mode) && static_cast<unsigned long long>(st.st_size) > max_bytes)
        throw Error("cannot read '" + path + "': it is " + std::to_string(st.st_size) + " bytes, more than the limit of " +
                    limit);
    std::string out;
    if (S_ISREG(st.st_mode)) out.reserve(static_cast<size_t>(st.st_size));
    // The size from fstat is only a hint: the file may grow while it is read, and special files
    // report 0, so the limit is enforced on what is actually read.
    char buf[1 << 16];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            throw Error("cannot read '" + path + "': " + std::strerror(err));
        }
        if (n == 0) break;
        if (out.size() + static_cast<size_t>(n) > max_bytes)
            throw Error("cannot read '" + path + "': it holds more than the limit of " + limit);
        out.append(buf, static_cast<size_t>(n));
    }
    return out;
}

}  // namespace kvchat
