#pragma once
// A Hugging Face model folder: config.json plus model.safetensors, or shards
// model-0000k-of-0000n.safetensors listed by model.safetensors.index.json. Each file is
// memory-mapped and its header bounds-checked; the tensors are used in place, never copied.
#include "engine/common/mapped_file.h"
#include "engine/format/gguf_file.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvchat {

// One tensor entry of a safetensors header.
struct SafetensorsTensorInfo {
    std::string name;
    TensorType type = TensorType::F32;  // F32, F16 or BF16: the only dtypes accepted
    std::vector<int64_t> shape;         // as stored: row-major, the last dimension varies fastest
    uint64_t begin = 0;                 // byte range inside the data section
    uint64_t end = 0;
};

struct SafetensorsHeader {
    uint64_t data_start = 0;  // 8 + the JSON length: where the data section begins in the file
    std::vector<SafetensorsTensorInfo> tensors;  // in the order of their data
};

// Parses and checks the header of a whole .safetensors file held in memory: the JSON length sane
// and inside the file, the JSON an object of tensors with a known dtype, 0 to 4 positive
// dimensions, data_offsets inside the data section, byte sizes matching the shapes, no overlaps
// and no duplicate names. Throws kvchat::Error starting with `what` (usually the path).
SafetensorsHeader parse_safetensors_header(const uint8_t* file, size_t size, const std::string& what);

class SafetensorsDir {
public:
    // Opens the folder and maps every shard. Throws kvchat::Error naming the file and the problem.
    static std::unique_ptr<SafetensorsDir> open(const std::string& folder);
    ~SafetensorsDir() = default;
    SafetensorsDir(const SafetensorsDir&) = delete;
    SafetensorsDir& operator=(const SafetensorsDir&) = delete;

    const std::string& path() const { return path_; }
    const nlohmann::json& config() const { return config_; }
    // In GGUF dimension order: ne[0] is the last safetensors dimension. The data points into a
    // mapping and is only as aligned as the file makes it; read it with memcpy or unaligned loads.
    const std::vector<TensorView>& tensors() const { return tensors_; }
    const TensorView* tensor(std::string_view name) const;  // nullptr when absent
    const std::vector<std::string>& shard_paths() const { return shard_paths_; }
    // Hex SHA-256 over config.json and each shard's header (length and JSON), shards in name order.
    const std::string& fingerprint() const { return fingerprint_; }
    // Empty when the folder has no such file.
    const std::string& tokenizer_model_path() const { return tokenizer_model_path_; }
    const std::string& tokenizer_config_path() const { return tokenizer_config_path_; }

private:
    SafetensorsDir() = default;
    std::string path_;
    nlohmann::json config_;
    std::vector<MappedFile> shards_;
    std::vector<std::string> shard_paths_;
    std::vector<TensorView> tensors_;
    std::unordered_map<std::string, size_t> tensor_index_;
    std::string fingerprint_;
    std::string tokenizer_model_path_;
    std::string tokenizer_config_path_;
};

}  // namespace kvchat
