#include "engine/common/mapped_file.h"

#include "engine/common/regular_file.h"
#include "engine/error.h"

#include <cerrno>
#include <cstring>
#include <sys/mman.h>
#include <utility>

namespace kvchat {

MappedFile MappedFile::open(const std::string& path) {
    const RegularFile file = RegularFile::open(path);  // refuses FIFOs, devices and folders
    MappedFile m;
    m.path_ = path;
    m.size_ = static_cast<size_t>(file.size());
    if (m.size_ > 0) {
        // MAP_PRIVATE + PROT_READ: pages come from the page cache and are never written back.
        void* addr = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
        if (addr == MAP_FAILED) throw Error("'" + path + "': cannot map the file: " + std::strerror(errno));
        m.addr_ = addr;
    }
    return m;  // the mapping keeps the file alive after the descriptor closes
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
