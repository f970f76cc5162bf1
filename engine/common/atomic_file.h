#pragma once
// Files that are either wholly old or wholly new after a crash: cache snapshots and anything
// else written beside the database. The bytes go to a temporary file in the target's directory
// (so the rename cannot cross file systems), are flushed to disk, and the temporary file is then
// renamed over the target; the directory is flushed so the rename itself survives a power cut.
#include <cstddef>
#include <string>
#include <string_view>

namespace kvchat {

// One atomic replacement of `path`, for writers that produce their bytes in pieces (a cache
// snapshot layer by layer). Nothing is visible at `path` until commit(); destroying an
// uncommitted AtomicFile, or any failure, removes the temporary file. Every failure throws
// kvchat::Error naming the target path and the system's reason (e.g. "No space left on device").
// The file is created readable by its owner only: it holds conversation data.
class AtomicFile {
public:
    explicit AtomicFile(std::string path);
    ~AtomicFile();
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;

    void write(const void* data, size_t size);
    void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
    // Flushes, renames over the target and flushes the directory. Call once.
    void commit();

    const std::string& path() const { return path_; }
    const std::string& temporary_path() const { return temp_path_; }

private:
    [[noreturn]] void fail(const std::string& what, int err);
    void discard() noexcept;

    std::string path_;
    std::string temp_path_;
    int fd_ = -1;
    bool committed_ = false;
};

// Replaces `path` with `bytes` atomically (see AtomicFile).
void write_file_atomically(const std::string& path, std::string_view bytes);

// The whole content of `path`, refusing files larger than `max_bytes` (a damaged or hostile file
// must not exhaust memory). Throws kvchat::Error naming the path and the reason.
std::string read_whole_file(const std::string& path, size_t max_bytes);

}  // namespace kvchat
