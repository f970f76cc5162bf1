#pragma once
// A regular file mapped read-only into memory. Model weights are used in place from the mapping,
// so opening a model costs address space, not resident memory.
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvchat {

class MappedFile {
public:
    // Maps the whole file. Throws kvchat::Error naming the path when it is missing, not a regular
    // file, or cannot be mapped. An empty file gives an empty mapping (data() == nullptr).
    static MappedFile open(const std::string& path);
    MappedFile() = default;
    ~MappedFile();
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return static_cast<const uint8_t*>(addr_); }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }
    // Gives up ownership: the caller must munmap(addr, size) itself.
    void* release();

private:
    std::string path_;
    void* addr_ = nullptr;
    size_t size_ = 0;
};

}  // namespace kvchat
