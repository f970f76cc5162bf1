#include "engine/format/gguf_file.h"

#include "engine/common/mapped_file.h"
#include "engine/common/regular_file.h"
#include "engine/common/sha256.h"
#include "engine/error.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <sys/mman.h>

namespace kvchat {

namespace {
constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian uint32
}  // namespace

GgufHeader read_gguf_header(const std::string& path) {
    RegularFile f;
    try {
        f = RegularFile::open(path);
    } catch (const Error& e) {
        throw Error(std::string("model file ") + e.what());
    }
    unsigned char buf[24];
    const size_t got = f.read_at(0, buf, sizeof buf);
    uint32_t magic = 0;
    if (got >= 4) std::memcpy(&magic, buf, 4);
    if (got < 4 || magic != kGgufMagic)
        throw Error("model file '" + path + "': not a GGUF file (wrong magic)");
    if (got < sizeof buf) throw Error("model file '" + path + "': truncated GGUF header");

    GgufHeader h;
    h.file_size = f.size();
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

namespace {

static_assert(std::endian::native == std::endian::little, "GGUF fields are read as little-endian");

constexpr uint32_t kDefaultAlignment = 32;
constexpr uint64_t kMaxAlignment = uint64_t(1) << 30;
constexpr size_t kMaxKeyBytes = 65535;        // the specification's limit for keys
constexpr size_t kMaxTensorNameBytes = 64;    // the specification's limit for tensor names
constexpr int kMaxArrayNesting = 8;           // real files nest at most once; deeper is an attack
// Every metadata value costs a GgufValue (~48 bytes) however small it is in the file; this caps
// the memory a file can make us allocate. Real vocabularies hold about a million values.
constexpr uint64_t kMaxMetadataValues = uint64_t(1) << 23;
constexpr int kMaxDims = 4;
// Smallest encodings, used to refuse counts the rest of the file could not possibly hold.
constexpr size_t kMinMetadataPairBytes = 8 + 4 + 1;          // empty key, type, one byte
constexpr size_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;        // empty name, n_dims 0, type, offset

std::string type_name(uint32_t t) {
    static constexpr const char* kNames[] = {"uint8", "int8",  "uint16", "int16",  "uint32", "int32", "float32",
                                             "bool",  "string", "array", "uint64", "int64",  "float64"};
    return t < std::size(kNames) ? kNames[t] : "type " + std::to_string(t);
}

// Bytes the smallest value of a type takes, so that an array count can be checked against the
// bytes left before anything is allocated for it.
size_t min_value_bytes(uint32_t t) {
    switch (static_cast<GgufType>(t)) {
        case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
        case GgufType::UINT16: case GgufType::INT16: return 2;
        case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
        case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
        case GgufType::STRING: return 8;       // the length
        case GgufType::ARRAY: return 4 + 8;    // element type and count
    }
    return 0;
}

// What is being read, for messages; formatted only when something is wrong, because the happy
// path reads a million vocabulary entries.
struct Field {
    const char* what;
    const std::string* subject = nullptr;  // a key or tensor name
    const char* connector = " of key ";
    std::string describe() const {
        return subject ? std::string(what) + connector + "'" + *subject + "'" : std::string(what);
    }
};

struct ParsedGguf {
    uint32_t version = 0;
    std::vector<std::pair<std::string, GgufValue>> metadata;
    std::unordered_map<std::string, size_t> metadata_index;
    std::vector<TensorView> tensors;
    std::unordered_map<std::string, size_t> tensor_index;
    std::string fingerprint;
};

// Reads a GGUF image from memory. Every length and count is checked against the bytes left
// before it is used, so that no input can make it read out of bounds or allocate without limit.
class GgufParser {
public:
    GgufParser(const uint8_t* data, size_t size, const std::string& path) : data_(data), size_(size), path_(path) {}

    ParsedGguf parse() {
        ParsedGguf out;
        if (size_ < 4)
            fail("not a GGUF file (truncated: " + std::to_string(size_) + " bytes, shorter than the magic)");
        if (read<uint32_t>({"magic"}) != kGgufMagic) fail("not a GGUF file (wrong magic)");
        out.version = read<uint32_t>({"version"});
        if (out.version != 2 && out.version != 3) {
            // Version 1 used 32-bit counts; a byte-swapped 2 or 3 is a big-endian file.
            const bool swapped = out.version == 0x02000000u || out.version == 0x03000000u;
            fail("unsupported GGUF version " + std::to_string(out.version) +
                 (swapped ? " (a big-endian file?)" : " (only versions 2 and 3 are read)"));
        }
        const uint64_t tensor_count = read<uint64_t>({"tensor count"});
        const uint64_t metadata_count = read<uint64_t>({"metadata count"});
        if (metadata_count > left() / kMinMetadataPairBytes)
            fail("metadata count " + std::to_string(metadata_count) + " cannot fit in the " + std::to_string(left()) +
                 " bytes left (truncated or corrupt)");
        if (tensor_count > left() / kMinTensorInfoBytes)
            fail("tensor count " + std::to_string(tensor_count) + " cannot fit in the " + std::to_string(left()) +
                 " bytes left (truncated or corrupt)");

        out.metadata.reserve(metadata_count);
        for (uint64_t i = 0; i < metadata_count; ++i) {
            const size_t at = pos_;
            std::string key = read_string({"metadata key"});
            if (key.size() > kMaxKeyBytes)
                fail("metadata key at offset " + std::to_string(at) + " is longer than " +
                     std::to_string(kMaxKeyBytes) + " bytes");
            if (!out.metadata_index.emplace(key, out.metadata.size()).second)
                fail("duplicate metadata key '" + key + "'");
            const uint32_t type = read<uint32_t>({"value type", &key});
            GgufValue value = read_value(type, key, 0);
            out.metadata.emplace_back(std::move(key), std::move(value));
        }
        const uint64_t alignment = alignment_of(out);

        if (tensor_count > left() / kMinTensorInfoBytes)
            fail("tensor count " + std::to_string(tensor_count) + " cannot fit in the " + std::to_string(left()) +
                 " bytes left (truncated or corrupt)");
        std::vector<uint64_t> offsets;
        out.tensors.reserve(tensor_count);
        offsets.reserve(tensor_count);
        for (uint64_t i = 0; i < tensor_count; ++i) {
            offsets.push_back(0);
            out.tensors.push_back(read_tensor_info(i, offsets.back()));
            if (!out.tensor_index.emplace(out.tensors.back().name, i).second)
                fail("duplicate tensor name '" + out.tensors.back().name + "'");
        }

        // The identity of the model is everything that describes it; the weights follow.
        const size_t table_end = pos_;
        Sha256 sha;
        sha.update(data_, table_end);
        out.fingerprint = sha.hex_digest();

        const uint64_t data_start = (uint64_t(table_end) + alignment - 1) / alignment * alignment;
        place_tensor_data(out.tensors, offsets, data_start, alignment);
        return out;
    }

private:
    [[noreturn]] void fail(const std::string& what) const { throw Error("model file '" + path_ + "': " + what); }

    size_t left() const { return size_ - pos_; }

    const uint8_t* take(size_t n, const Field& what) {
        if (n > left())
            fail("truncated: " + what.describe() + " at offset " + std::to_string(pos_) + " needs " + std::to_string(n) +
                 " bytes, only " + std::to_string(left()) + " left");
        const uint8_t* p = data_ + pos_;
        pos_ += n;
        return p;
    }

    template <class T>
    T read(const Field& what) {
        T v;
        std::memcpy(&v, take(sizeof v, what), sizeof v);  // the mapping has no alignment guarantee here
        return v;
    }

    std::string read_string(const Field& what) {
        const size_t at = pos_;
        const uint64_t len = read<uint64_t>(what);
        if (len > left())
            fail("string length " + std::to_string(len) + " of " + what.describe() + " at offset " + std::to_string(at) +
                 " is larger than the " + std::to_string(left()) + " bytes left in the file (truncated or corrupt)");
        const uint8_t* p = take(static_cast<size_t>(len), what);
        return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
    }

    GgufValue read_value(uint32_t type, const std::string& key, int depth) {
        GgufValue out;
        out.type = static_cast<GgufType>(type);
        const Field what{"value", &key};
        switch (out.type) {
            case GgufType::UINT8: out.v = uint64_t(read<uint8_t>(what)); break;
            case GgufType::INT8: out.v = int64_t(read<int8_t>(what)); break;
            case GgufType::UINT16: out.v = uint64_t(read<uint16_t>(what)); break;
            case GgufType::INT16: out.v = int64_t(read<int16_t>(what)); break;
            case GgufType::UINT32: out.v = uint64_t(read<uint32_t>(what)); break;
            case GgufType::INT32: out.v = int64_t(read<int32_t>(what)); break;
            case GgufType::UINT64: out.v = read<uint64_t>(what); break;
            case GgufType::INT64: out.v = read<int64_t>(what); break;
            case GgufType::FLOAT32: out.v = double(read<float>(what)); break;
            case GgufType::FLOAT64: out.v = read<double>(what); break;
            case GgufType::BOOL: {
                const size_t at = pos_;
                const uint8_t b = read<uint8_t>(what);
                if (b > 1)
                    fail("invalid bool " + std::to_string(b) + " for key '" + key + "' at offset " + std::to_string(at));
                out.v = b == 1;
                break;
            }
            case GgufType::STRING: out.v = read_string(what); break;
            case GgufType::ARRAY: out.v = read_array(key, depth); break;
            default:
                fail("unknown metadata value type " + std::to_string(type) + " for key '" + key + "' at offset " +
                     std::to_string(pos_ - 4));
        }
        return out;
    }

    std::shared_ptr<GgufArray> read_array(const std::string& key, int depth) {
        if (depth >= kMaxArrayNesting)
            fail("arrays nested deeper than " + std::to_string(kMaxArrayNesting) + " levels in key '" + key + "'");
        const size_t at = pos_;
        const uint32_t elem_type = read<uint32_t>({"array element type", &key});
        const size_t min_bytes = min_value_bytes(elem_type);
        if (min_bytes == 0)
            fail("unknown metadata value type " + std::to_string(elem_type) + " for the elements of array '" + key +
                 "' at offset " + std::to_string(at));
        const uint64_t count = read<uint64_t>({"array count", &key});
        if (count > left() / min_bytes)
            fail("array count " + std::to_string(count) + " of " + type_name(elem_type) + " in key '" + key +
                 "' at offset " + std::to_string(at) + " is larger than the " + std::to_string(left()) +
                 " bytes left in the file could hold (truncated or corrupt)");
        values_ += count;
        if (values_ > kMaxMetadataValues)
            fail("metadata holds more than " + std::to_string(kMaxMetadataValues) + " array values (key '" + key +
                 "')");
        auto arr = std::make_shared<GgufArray>();
        arr->elem_type = static_cast<GgufType>(elem_type);
        arr->items.reserve(static_cast<size_t>(count));
        for (uint64_t i = 0; i < count; ++i) arr->items.push_back(read_value(elem_type, key, depth + 1));
        return arr;
    }

    uint64_t alignment_of(const ParsedGguf& parsed) const {
        const auto it = parsed.metadata_index.find("general.alignment");
        if (it == parsed.metadata_index.end()) return kDefaultAlignment;
        const GgufValue& v = parsed.metadata[it->second].second;
        uint64_t a = 0;
        if (const auto* u = std::get_if<uint64_t>(&v.v)) {
            a = *u;
        } else if (const auto* s = std::get_if<int64_t>(&v.v); s && *s >= 0) {
            a = static_cast<uint64_t>(*s);
        } else if (std::holds_alternative<int64_t>(v.v)) {
            fail("general.alignment " + std::to_string(std::get<int64_t>(v.v)) + " is not a power of two");
        } else {
            fail("general.alignment is a " + type_name(static_cast<uint32_t>(v.type)) + ", not an integer");
        }
        if (!std::has_single_bit(a)) fail("general.alignment " + std::to_string(a) + " is not a power of two");
        if (a > kMaxAlignment) fail("general.alignment " + std::to_string(a) + " is absurdly large");
        return a;
    }

    TensorView read_tensor_info(uint64_t index, uint64_t& offset) {
        TensorView t;
        const size_t at = pos_;
        const std::string number = std::to_string(index);
        t.name = read_string({"name of tensor", &number, " number "});
        if (t.name.size() > kMaxTensorNameBytes)
            fail("tensor name at offset " + std::to_string(at) + " is longer than " +
                 std::to_string(kMaxTensorNameBytes) + " bytes");
        const std::string tensor = "tensor '" + t.name + "'";
        const uint32_t n_dims = read<uint32_t>({"n_dims", &t.name, " of tensor "});
        if (n_dims > kMaxDims)
            fail(tensor + ": n_dims " + std::to_string(n_dims) + " is more than " + std::to_string(kMaxDims));
        t.n_dims = static_cast<int>(n_dims);
        int64_t elements = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const std::string dim = "ne[" + std::to_string(d) + "]";
            const uint64_t raw = read<uint64_t>({"a dimension", &t.name, " of tensor "});
            // Shown as signed: a "negative" dimension is how a corrupt size usually looks.
            const int64_t ne = static_cast<int64_t>(raw);
            if (ne <= 0) fail(tensor + ": dimension " + dim + " = " + std::to_string(ne) + " is not positive");
            t.ne[d] = ne;
            if (__builtin_mul_overflow(elements, ne, &elements))
                fail(tensor + ": the element count overflows (dimension " + dim + " = " + std::to_string(ne) + ")");
        }
        const uint32_t type_id = read<uint32_t>({"type", &t.name, " of tensor "});
        const std::optional<TypeTraits> traits = type_traits(type_id);
        if (!traits) fail(tensor + " has unknown or unsupported tensor type id " + std::to_string(type_id));
        t.type = static_cast<TensorType>(type_id);
        offset = read<uint64_t>({"data offset", &t.name, " of tensor "});

        if (t.ne[0] % traits->block_elems != 0)
            fail(tensor + ": ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the block size " +
                 std::to_string(traits->block_elems) + " of type " + std::string(traits->name));
        // Checked first, so that row_bytes below works on numbers known to fit.
        size_t row = 0;
        size_t total = 0;
        const int64_t rows = t.ne[1] * t.ne[2] * t.ne[3];  // cannot overflow: the full product did not
        if (__builtin_mul_overflow(static_cast<uint64_t>(t.ne[0] / traits->block_elems), traits->block_bytes, &row) ||
            __builtin_mul_overflow(row, static_cast<uint64_t>(rows), &total))
            fail(tensor + ": the byte size overflows");
        t.nbytes = row_bytes(t.type, t.ne[0]) * static_cast<size_t>(rows);
        return t;
    }

    void place_tensor_data(std::vector<TensorView>& tensors, const std::vector<uint64_t>& offsets,
                           uint64_t data_start, uint64_t alignment) const {
        std::vector<size_t> order(tensors.size());
        for (size_t i = 0; i < tensors.size(); ++i) {
            TensorView& t = tensors[i];
            const std::string tensor = "tensor '" + t.name + "'";
            if (offsets[i] % alignment != 0)
                fail(tensor + ": data offset " + std::to_string(offsets[i]) + " is not a multiple of the alignment " +
                     std::to_string(alignment));
            uint64_t begin = 0;
            uint64_t end = 0;
            if (__builtin_add_overflow(data_start, offsets[i], &begin) ||
                __builtin_add_overflow(begin, uint64_t(t.nbytes), &end) || end > size_)
                fail(tensor + ": data at offset " + std::to_string(offsets[i]) + " (" + std::to_string(t.nbytes) +
                     " bytes) extends past the end of the file (" + std::to_string(size_) +
                     " bytes; truncated or corrupt)");
            t.data = data_ + begin;
            order[i] = i;
        }
        std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return offsets[a] < offsets[b]; });
        for (size_t k = 1; k < order.size(); ++k) {
            const TensorView& prev = tensors[order[k - 1]];
            const TensorView& next = tensors[order[k]];
            if (offsets[order[k - 1]] + prev.nbytes > offsets[order[k]])
                fail("the data of tensors '" + prev.name + "' and '" + next.name + "' overlap");
        }
    }

    const uint8_t* data_;
    size_t size_;
    size_t pos_ = 0;
    const std::string& path_;
    uint64_t values_ = 0;
};

std::string kind_of(const GgufValue& v) { return type_name(static_cast<uint32_t>(v.type)); }

}  // namespace

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
    MappedFile map;
    try {
        map = MappedFile::open(path);
    } catch (const Error& e) {
        throw Error(std::string("model file ") + e.what());
    }
    ParsedGguf parsed = GgufParser(map.data(), map.size(), path).parse();

    std::unique_ptr<GgufFile> f(new GgufFile());
    f->path_ = path;
    f->version_ = parsed.version;
    f->size_ = map.size();
    f->map_ = map.release();
    f->metadata_ = std::move(parsed.metadata);
    f->metadata_index_ = std::move(parsed.metadata_index);
    f->tensors_ = std::move(parsed.tensors);
    f->tensor_index_ = std::move(parsed.tensor_index);
    f->fingerprint_ = std::move(parsed.fingerprint);
    return f;
}

GgufFile::~GgufFile() {
    if (map_) ::munmap(map_, size_);
}

const GgufValue* GgufFile::find(std::string_view key) const {
    const auto it = metadata_index_.find(std::string(key));
    return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const TensorView* GgufFile::tensor(std::string_view name) const {
    const auto it = tensor_index_.find(std::string(name));
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
[[noreturn]] void key_error(const std::string& path, std::string_view key, const std::string& problem) {
    throw Error("model file '" + path + "': metadata key '" + std::string(key) + "' " + problem);
}

const GgufValue& require(const GgufFile& f, std::string_view key) {
    const GgufValue* v = f.find(key);
    if (!v) key_error(f.path(), key, "is missing");
    return *v;
}

// Counts are written as uint32 by some converters and int32 by others; both are accepted as long
// as the value is not negative.
uint64_t as_uint(const GgufFile& f, std::string_view key, const GgufValue& v) {
    if (const auto* u = std::get_if<uint64_t>(&v.v)) return *u;
    if (const auto* s = std::get_if<int64_t>(&v.v)) {
        if (*s < 0) key_error(f.path(), key, "is negative (" + std::to_string(*s) + "), not an unsigned integer");
        return static_cast<uint64_t>(*s);
    }
    key_error(f.path(), key, "is a " + kind_of(v) + ", not an unsigned integer");
}

double as_float(const GgufFile& f, std::string_view key, const GgufValue& v) {
    if (const auto* d = std::get_if<double>(&v.v)) return *d;
    if (const auto* u = std::get_if<uint64_t>(&v.v)) return static_cast<double>(*u);
    if (const auto* s = std::get_if<int64_t>(&v.v)) return static_cast<double>(*s);
    key_error(f.path(), key, "is a " + kind_of(v) + ", not a number");
}

bool as_bool(const GgufFile& f, std::string_view key, const GgufValue& v) {
    if (const auto* b = std::get_if<bool>(&v.v)) return *b;
    key_error(f.path(), key, "is a " + kind_of(v) + ", not a bool");
}

const std::string& as_string(const GgufFile& f, std::string_view key, const GgufValue& v) {
    if (const auto* s = std::get_if<std::string>(&v.v)) return *s;
    key_error(f.path(), key, "is a " + kind_of(v) + ", not a string");
}
}  // namespace

uint64_t GgufFile::get_uint(std::string_view key) const { return as_uint(*this, key, require(*this, key)); }
double GgufFile::get_float(std::string_view key) const { return as_float(*this, key, require(*this, key)); }
bool GgufFile::get_bool(std::string_view key) const { return as_bool(*this, key, require(*this, key)); }
std::string GgufFile::get_string(std::string_view key) const { return as_string(*this, key, require(*this, key)); }

const GgufArray& GgufFile::get_array(std::string_view key) const {
    const GgufValue& v = require(*this, key);
    if (const auto* a = std::get_if<std::shared_ptr<GgufArray>>(&v.v)) return **a;
    key_error(path_, key, "is a " + kind_of(v) + ", not an array");
}

uint64_t GgufFile::get_uint(std::string_view key, uint64_t fallback) const {
    const GgufValue* v = find(key);
    return v ? as_uint(*this, key, *v) : fallback;
}
double GgufFile::get_float(std::string_view key, double fallback) const {
    const GgufValue* v = find(key);
    return v ? as_float(*this, key, *v) : fallback;
}
bool GgufFile::get_bool(std::string_view key, bool fallback) const {
    const GgufValue* v = find(key);
    return v ? as_bool(*this, key, *v) : fallback;
}
std::string GgufFile::get_string(std::string_view key, const std::string& fallback) const {
    const GgufValue* v = find(key);
    return v ? as_string(*this, key, *v) : fallback;
}

}  // namespace kvchat
