#pragma once
// GGUF header: the fixed fields at the start of every GGUF file.
#include <cstdint>
#include <string>

namespace kvchat {

struct GgufHeader {
    uint32_t version = 0;
    uint64_t tensor_count = 0;
    uint64_t metadata_count = 0;
    uint64_t file_size = 0;
};

// Reads and checks the header of the GGUF file at `path`. Throws kvchat::Error naming the path
// and the problem (missing, unreadable, not GGUF, unsupported version, absurd counts).
GgufHeader read_gguf_header(const std::string& path);

}  // namespace kvchat
