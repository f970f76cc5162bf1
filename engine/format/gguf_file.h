#pragma once
// GGUF files (v2 and v3): memory-mapped, metadata of every value type, tensor infos, alignment
// and data offsets, all bounds-checked. Tensor data is used in place, never copied.
#include "engine/compute/tensor_type.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

namespace kvchat {

struct GgufHeader {
    uint32_t version = 0;
    uint64_t tensor_count = 0;
    uint64_t metadata_count = 0;
    uint64_t file_size = 0;
};

// Reads and checks only the fixed header of the GGUF file at `path`. Throws kvchat::Error naming
// the path and the problem (missing, unreadable, not GGUF, unsupported version, absurd counts).
GgufHeader read_gguf_header(const std::string& path);

// GGUF metadata value types, numbered as in the specification.
enum class GgufType : uint32_t {
    UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
    STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

struct GgufArray;
// A metadata value. Integers of every width are held as int64/uint64, floats as double, with
// the original type kept in `type`.
struct GgufValue {
    GgufType type = GgufType::UINT8;
    std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>> v;
};
struct GgufArray {
    GgufType elem_type = GgufType::UINT8;
    std::vector<GgufValue> items;
};

// A tensor as stored: GGUF dimension order (ne[0] is the fastest-varying, the row length).
struct TensorView {
    std::string name;
    TensorType type = TensorType::F32;
    int n_dims = 0;
    std::array<int64_t, 4> ne{1, 1, 1, 1};
    const void* data = nullptr;  // into the mapping
    size_t nbytes = 0;
    int64_t elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

class GgufFile {
public:
    // Maps and parses the file. Throws kvchat::Error naming the path and what is wrong: wrong
    // magic, truncation, a string or array longer than the file, an unknown value or tensor type,
    // absurd dimensions, tensor data past the end of the file, overlapping or misaligned data.
    static std::unique_ptr<GgufFile> open(const std::string& path);
    ~GgufFile();
    GgufFile(const GgufFile&) = delete;
    GgufFile& operator=(const GgufFile&) = delete;

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    size_t file_size() const { return size_; }

    const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
    const GgufValue* find(std::string_view key) const;
    // Typed getters: throw kvchat::Error naming the key when it is missing or of another kind.
    uint64_t get_uint(std::string_view key) const;
    double get_float(std::string_view key) const;
    bool get_bool(std::string_view key) const;
    std::string get_string(std::string_view key) const;
    const GgufArray& get_array(std::string_view key) const;
    // The same with a default used when the key is absent (a key of the wrong kind still throws).
    uint64_t get_uint(std::string_view key, uint64_t fallback) const;
    double get_float(std::string_view key, double fallback) const;
    bool get_bool(std::string_view key, bool fallback) const;
    std::string get_string(std::string_view key, const std::string& fallback) const;

    const std::vector<TensorView>& tensors() const { return tensors_; }
    const TensorView* tensor(std::string_view name) const;  // nullptr when absent

    // Hex SHA-256 over the header, the metadata and the tensor table: identifies the model for
    // saved caches and prefixes.
    const std::string& fingerprint() const { return fingerprint_; }

private:
    GgufFile() = default;
    std::string path_;
    uint32_t version_ = 0;
    size_t size_ = 0;
    void* map_ = nullptr;
    std::vector<std::pair<std::string, GgufValue>> metadata_;
    std::unordered_map<std::string, size_t> metadata_index_;
    std::vector<TensorView> tensors_;
    std::unordered_map<std::string, size_t> tensor_index_;
    std::string fingerprint_;
};

}  // namespace kvchat
