#include "engine/common/mapped_file.h"

#include "engine/error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace kvchat {

MappedFile MappedFile::open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error("'" + path + "': " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        throw Error("'" + path + "': " + std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error("'" + path + "': not a regular file");
    }
    MappedFile m;
    m.path_ = path;
    m.size_ = static_cast<size_t>(st.st_size);
    if (m.size_ > 0) {
        // MAP_PRIVATE + PROT_READ: pages come from the page cache and are never written back.
        void* addr = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (addr == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            throw Error("'" + path + "': cannot map the file: " + std::strerror(err));
        }
        m.addr_ = addr;
    }
    ::close(fd);  // the mapping keeps the file alive
    return m;
}

MappedFile::~MappedFile() {
    if (addr_) ::munmap(addr_, size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      addr_(std::exchange(other.addr_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
    if (this != &other) {
        if (addr_) ::munmap(addr_, size_);
        path_ = std::move(other.path_);
        addr_ = std::exchange(other.addr_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

void* MappedFile::release() {
    size_ = 0;
    return std::exchange(addr_, nullptr);
}

}  // namespace kvchat
