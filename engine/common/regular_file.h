#pragma once
// A file kvchat was told to read (a model, a tokenizer, a snapshot, a database, a prefix file)
// may be anything: a FIFO that blocks an open() forever, a device that never ends, a folder.
// Every such file is opened here: without blocking, checked with fstat to be a regular file,
// and read no further than the size fstat reported.
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvchat {

class RegularFile {
public:
    // Opens `path` read-only. Throws kvchat::Error "'PATH': REASON" when it is missing, cannot be
    // opened, or is not a regular file (the reason names what it is: a FIFO, a character
    // device, a directory...). A FIFO without a writer does not block: it is refused.
    static RegularFile open(const std::string& path);
    RegularFile() = default;
    ~RegularFile();
    RegularFile(RegularFile&& other) noexcept;
    RegularFile& operator=(RegularFile&& other) noexcept;
    RegularFile(const RegularFile&) = delete;
    RegularFile& operator=(const RegularFile&) = delete;

    int fd() const { return fd_; }
    uint64_t size() const { return size_; }
    const std::string& path() const { return path_; }
    // Reads bytes [offset, offset + n) into `out`; fewer only at the end of the file.
    size_t read_at(uint64_t offset, void* out, size_t n) const;
    // The whole file, refused (naming both sizes) when it is larger than max_bytes. Never reads
    // past the size the file had when it was opened (files of size 0, such as /proc's, are read
    // to max_bytes).
    std::string read_all(size_t max_bytes) const;
    // Gives up ownership of the descriptor: the caller closes it.
    int release();

private:
    std::string path_;
    int fd_ = -1;
    uint64_t size_ = 0;
};

// What a stat mode is, in words: "a regular file", "a FIFO", "a character device", "a directory".
std::string describe_file_type(unsigned mode);

// True when `path` is a regular file, false when nothing is there; throws kvchat::Error naming the
// path and what is there when it is something else (a FIFO, a device, a directory), or when it
// cannot be examined. For optional files, and for files that will be created if missing.
bool regular_file_exists(const std::string& path);

}  // namespace kvchat
