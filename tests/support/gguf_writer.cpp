#include "support/gguf_writer.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace kvchat::test {

namespace {
template <class T>
std::string raw(T v) {
    std::string s(sizeof v, '\0');
    std::memcpy(s.data(), &v, sizeof v);
    return s;
}

std::string encode_string(const std::string& s) { return le64(s.size()) + s; }

std::string encode_value(const GgufValue& v) {
    switch (v.type) {
        case GgufType::UINT8: return raw(uint8_t(std::get<uint64_t>(v.v)));
        case GgufType::UINT16: return raw(uint16_t(std::get<uint64_t>(v.v)));
        case GgufType::UINT32: return raw(uint32_t(std::get<uint64_t>(v.v)));
        case GgufType::UINT64: return raw(std::get<uint64_t>(v.v));
        case GgufType::INT8: return raw(int8_t(std::get<int64_t>(v.v)));
        case GgufType::INT16: return raw(int16_t(std::get<int64_t>(v.v)));
        case GgufType::INT32: return raw(int32_t(std::get<int64_t>(v.v)));
        case GgufType::INT64: return raw(std::get<int64_t>(v.v));
        case GgufType::FLOAT32: return raw(float(std::get<double>(v.v)));
        case GgufType::FLOAT64: return raw(std::get<double>(v.v));
        case GgufType::BOOL: return raw(uint8_t(std::get<bool>(v.v) ? 1 : 0));
        case GgufType::STRING: return encode_string(std::get<std::string>(v.v));
        case GgufType::ARRAY: {
            const GgufArray& a = *std::get<std::shared_ptr<GgufArray>>(v.v);
            std::string out = le32(uint32_t(a.elem_type)) + le64(a.items.size());
            for (const GgufValue& item : a.items) out += encode_value(item);
            return out;
        }
    }
    throw std::invalid_argument("GgufWriter: value of unknown type");
}

uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }
}  // namespace

GgufValue gguf_uint(GgufType type, uint64_t v) { return GgufValue{type, v}; }
GgufValue gguf_int(GgufType type, int64_t v) { return GgufValue{type, v}; }
GgufValue gguf_float(GgufType type, double v) { return GgufValue{type, v}; }
GgufValue gguf_bool(bool v) { return GgufValue{GgufType::BOOL, v}; }
GgufValue gguf_string(std::string v) { return GgufValue{GgufType::STRING, std::move(v)}; }
GgufValue gguf_array(GgufType elem_type, std::vector<GgufValue> items) {
    auto a = std::make_shared<GgufArray>();
    a->elem_type = elem_type;
    a->items = std::move(items);
    return GgufValue{GgufType::ARRAY, std::move(a)};
}

std::string le32(uint32_t v) { return raw(v); }
std::string le64(uint64_t v) { return raw(v); }

GgufWriter::GgufWriter(uint32_t version, uint32_t alignment) : version_(version), alignment_(alignment) {}

GgufWriter& GgufWriter::add(const std::string& key, const GgufValue& value) {
    return add_raw(key, uint32_t(value.type), encode_value(value));
}

GgufWriter& GgufWriter::add_string_array(const std::string& key, const std::vector<std::string>& v) {
    std::vector<GgufValue> items;
    for (const std::string& s : v) items.push_back(gguf_string(s));
    return add(key, gguf_array(GgufType::STRING, std::move(items)));
}

GgufWriter& GgufWriter::add_float32_array(const std::string& key, const std::vector<float>& v) {
    std::vector<GgufValue> items;
    for (float f : v) items.push_back(gguf_float(GgufType::FLOAT32, f));
    return add(key, gguf_array(GgufType::FLOAT32, std::move(items)));
}

GgufWriter& GgufWriter::add_int32_array(const std::string& key, const std::vector<int32_t>& v) {
    std::vector<GgufValue> items;
    for (int32_t i : v) items.push_back(gguf_int(GgufType::INT32, i));
    return add(key, gguf_array(GgufType::INT32, std::move(items)));
}

GgufWriter& GgufWriter::add_raw(const std::string& key, uint32_t type, const std::string& value_bytes) {
    if (key == "general.alignment") has_alignment_key_ = true;
    pairs_.push_back(encode_string(key) + le32(type) + value_bytes);
    return *this;
}

GgufWriter& GgufWriter::set(const std::string& key, const GgufValue& value) {
    const std::string prefix = encode_string(key);
    const std::string pair = prefix + le32(uint32_t(value.type)) + encode_value(value);
    for (std::string& p : pairs_)
        if (p.compare(0, prefix.size(), prefix) == 0) {
            p = pair;
            return *this;
        }
    return add(key, value);
}

GgufWriter& GgufWriter::remove(const std::string& key) {
    const std::string prefix = encode_string(key);
    pairs_.erase(std::remove_if(pairs_.begin(), pairs_.end(),
                                [&](const std::string& p) { return p.compare(0, prefix.size(), prefix) == 0; }),
                 pairs_.end());
    return *this;
}

GgufWriter& GgufWriter::add_tensor(GgufTensorSpec tensor) {
    tensors_.push_back(std::move(tensor));
    return *this;
}

std::string GgufWriter::head() const {
    std::vector<std::string> pairs = pairs_;
    if (alignment_ != 32 && !has_alignment_key_)
        pairs.push_back(encode_string("general.alignment") + le32(uint32_t(GgufType::UINT32)) + le32(alignment_));
    std::string out = "GGUF" + le32(version_) + le64(tensors_.size()) + le64(pairs.size());
    for (const std::string& p : pairs) out += p;
    uint64_t offset = 0;
    for (const GgufTensorSpec& t : tensors_) {
        offset = align_up(offset, alignment_);
        out += encode_string(t.name) + le32(uint32_t(t.ne.size()));
        for (int64_t n : t.ne) out += le64(uint64_t(n));
        out += le32(t.type) + le64(t.offset.value_or(offset));
        offset += t.data.size();
    }
    return out;
}

size_t GgufWriter::table_end() const { return head().size(); }

std::string GgufWriter::bytes() const {
    std::string out = head();
    if (tensors_.empty()) return out;
    out.resize(align_up(out.size(), alignment_), '\0');
    const size_t data_start = out.size();
    for (const GgufTensorSpec& t : tensors_) {
        out.resize(data_start + align_up(out.size() - data_start, alignment_), '\0');
        out += t.data;
    }
    return out;
}

void GgufWriter::write(const std::string& path) const {
    const std::string b = bytes();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(b.data(), std::streamsize(b.size()));
    if (!f) throw std::runtime_error("GgufWriter: cannot write " + path);
}

}  // namespace kvchat::test
