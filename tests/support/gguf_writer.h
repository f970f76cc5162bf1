#pragma once
// Writes small GGUF files for tests: metadata of every value type (nested arrays included),
// tensors given as raw bytes, the data section laid out with the chosen alignment. Nothing is
// validated, so tests can also write the malformed files the reader must refuse.
#include "engine/format/gguf_file.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvchat::test {

struct GgufTensorSpec {
    std::string name;
    uint32_t type = 0;               // GGML type id, raw so that unknown ids can be written
    std::vector<int64_t> ne;         // n_dims = ne.size(); each written as a uint64
    std::string data;                // the tensor's bytes, written as given
    std::optional<uint64_t> offset;  // written in place of the computed data offset
};

// Metadata values for GgufWriter::add (and for comparing with what the reader returns).
GgufValue gguf_uint(GgufType type, uint64_t v);  // UINT8, UINT16, UINT32, UINT64
GgufValue gguf_int(GgufType type, int64_t v);    // INT8, INT16, INT32, INT64
GgufValue gguf_float(GgufType type, double v);   // FLOAT32, FLOAT64
GgufValue gguf_bool(bool v);
GgufValue gguf_string(std::string v);
GgufValue gguf_array(GgufType elem_type, std::vector<GgufValue> items);

// Little-endian encodings, for hand-made raw values.
std::string le32(uint32_t v);
std::string le64(uint64_t v);

class GgufWriter {
public:
    // `alignment` lays out the data section; a value other than 32 is also written as
    // general.alignment (uint32) unless the test adds that key itself.
    explicit GgufWriter(uint32_t version = 3, uint32_t alignment = 32);

    GgufWriter& add(const std::string& key, const GgufValue& value);
    GgufWriter& add_uint32(const std::string& key, uint32_t v) { return add(key, gguf_uint(GgufType::UINT32, v)); }
    GgufWriter& add_float32(const std::string& key, float v) { return add(key, gguf_float(GgufType::FLOAT32, v)); }
    GgufWriter& add_bool(const std::string& key, bool v) { return add(key, gguf_bool(v)); }
    GgufWriter& add_string(const std::string& key, const std::string& v) { return add(key, gguf_string(v)); }
    GgufWriter& add_string_array(const std::string& key, const std::vector<std::string>& v);
    GgufWriter& add_float32_array(const std::string& key, const std::vector<float>& v);
    GgufWriter& add_int32_array(const std::string& key, const std::vector<int32_t>& v);
    // A pair written exactly as given: the key, then `type` as a uint32, then `value_bytes`.
    GgufWriter& add_raw(const std::string& key, uint32_t type, const std::string& value_bytes);

    // Replaces the value of `key` where it was added (or adds it), and removes a key: for tests that
    // take a complete file and change one thing.
    GgufWriter& set(const std::string& key, const GgufValue& value);
    GgufWriter& remove(const std::string& key);

    GgufWriter& add_tensor(GgufTensorSpec tensor);

    // The whole file. Tensors follow each other in the order added, each at an aligned offset;
    // the last one ends the file (no trailing padding), so every shorter prefix is truncated.
    std::string bytes() const;
    void write(const std::string& path) const;
    // Length of header + metadata + tensor table: the bytes the fingerprint covers.
    size_t table_end() const;

private:
    std::string head() const;  // header, metadata and tensor table
    uint32_t version_;
    uint32_t alignment_;
    bool has_alignment_key_ = false;
    std::vector<std::string> pairs_;  // encoded metadata pairs
    std::vector<GgufTensorSpec> tensors_;
};

}  // namespace kvchat::test
