#pragma once
// SHA-256, for model fingerprints and snapshot checksums.
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvchat {

class Sha256 {
public:
    Sha256();
    void update(const void* data, size_t n);
    std::string hex_digest();  // finishes the hash

private:
    void block(const uint8_t* p);
    uint32_t h_[8];
    uint8_t buf_[64];
    size_t buf_len_ = 0;
    uint64_t total_ = 0;
};

}  // namespace kvchat
