#include "engine/model/gguf_file.h"

#include "engine/error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sys/stat.h>

namespace kvchat {

namespace {
constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian uint32

struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
};
}  // namespace

GgufHeader read_gguf_header(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
        throw Error("model file '" + path + "': " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw Error("model file '" + path + "': not a regular file");
    std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
    if (!f) throw Error("model file '" + path + "': " + std::strerror(errno));

    unsigned char buf[24];
    const size_t got = std::fread(buf, 1, sizeof buf, f.get());
    uint32_t magic = 0;
    if (got >= 4) std::memcpy(&magic, buf, 4);
    if (got < 4 || magic != kGgufMagic)
        throw Error("model file '" + path + "': not a GGUF file (wrong magic)");
    if (got < sizeof buf) throw Error("model file '" + path + "': truncated GGUF header");

    GgufHeader h;
    h.file_size = static_cast<uint64_t>(st.st_size);
    std::memcpy(&h.version, buf + 4, 4);
    if (h.version != 2 && h.version != 3)
        throw Error("model file '" + path + "': unsupported GGUF version " + std::to_string(h.version));
    std::memcpy(&h.tensor_count, buf + 8, 8);
    std::memcpy(&h.metadata_count, buf + 16, 8);
    // Every tensor info and metadata pair takes well over 8 bytes; more than the file can hold is corrupt.
    if (h.tensor_count > h.file_size / 8 || h.metadata_count > h.file_size / 8)
        throw Error("model file '" + path + "': absurd tensor or metadata count in GGUF header");
    return h;
}

}  // namespace kvchat
