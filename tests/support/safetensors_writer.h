#pragma once
// Writes small .safetensors files and Hugging Face model folders for tests. Nothing is
// validated, so tests can also write the malformed files the reader must refuse.
#include <cstdint>
#include <string>
#include <vector>

namespace kvchat::test {

struct SafetensorsTensorSpec {
    std::string name;
    std::string dtype;           // "F32", "F16", "BF16" (or anything, for bad-input tests)
    std::vector<int64_t> shape;  // row-major, as safetensors stores it
    std::string data;            // the tensor's bytes, written as given
};

// A whole .safetensors file: the 8-byte little-endian header length, the JSON header (padded with
// spaces to a multiple of 8 bytes, as the reference writer does), then the tensors' data in order.
std::string safetensors_bytes(const std::vector<SafetensorsTensorSpec>& tensors);
// A file with the header text exactly as given followed by `data`.
std::string safetensors_bytes_raw(const std::string& header_json, const std::string& data);

void write_file(const std::string& path, const std::string& bytes);

// A model folder: config.json with `config_json` as its text, and the tensors in
// model.safetensors (shards == 1) or split in order over model-0000k-of-0000n.safetensors files
// with model.safetensors.index.json. Returns the shard file names in order.
std::vector<std::string> write_safetensors_folder(const std::string& dir, const std::string& config_json,
                                                  const std::vector<SafetensorsTensorSpec>& tensors,
                                                  int shards = 1);

}  // namespace kvchat::test
