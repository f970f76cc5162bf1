#include "engine/model/safetensors_dir.h"

#include "engine/common/regular_file.h"
#include "engine/common/sha256.h"
#include "engine/error.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unordered_set>

namespace kvchat {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The reference implementation refuses headers over 100 MB; ours are a few hundred KB at most.
constexpr uint64_t kMaxHeaderBytes = 100u * 1000 * 1000;
constexpr size_t kMaxJsonFileBytes = 64u * 1024 * 1024;  // config.json, index.json
constexpr int kMaxDims = 4;

[[noreturn]] void fail(const std::string& what, const std::string& problem) { throw Error(what + ": " + problem); }

// Nesting deeper than any real header or config needs is refused before the JSON parser sees it,
// so that no input can make parsing or destruction recurse without bound.
void check_nesting(std::string_view text, int max_depth, const std::string& what) {
    int depth = 0;
    bool in_string = false;
    bool escaped = false;
    for (char c : text) {
        if (in_string) {
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            if (++depth > max_depth) fail(what, "JSON nested deeper than " + std::to_string(max_depth) + " levels");
        } else if (c == '}' || c == ']') {
            --depth;
        }
    }
}

// Parses JSON text, refusing duplicate keys in any object (nlohmann would keep the last one, so
// two entries for one tensor would silently become one).
json parse_json(std::string_view text, int max_depth, const std::string& what) {
    check_nesting(text, max_depth, what);
    std::vector<std::unordered_set<std::string>> keys;
    std::string duplicate;
    auto on_event = [&](int, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::object_start) {
            keys.emplace_back();
        } else if (event == json::parse_event_t::object_end) {
            if (!keys.empty()) keys.pop_back();
        } else if (event == json::parse_event_t::key && !keys.empty() && parsed.is_string()) {
            if (!keys.back().insert(parsed.get<std::string>()).second && duplicate.empty())
                duplicate = parsed.get<std::string>();
        }
        return true;
    };
    json j;
    try {
        j = json::parse(text.begin(), text.end(), on_event);
    } catch (const json::exception& e) {
        fail(what, std::string("not valid JSON: ") + e.what());
    }
    if (!duplicate.empty()) fail(what, "duplicate JSON key '" + duplicate + "'");
    return j;
}

// Reading goes through RegularFile: a FIFO or a device named config.json is refused, not read forever.
std::string read_small_file(const fs::path& p) {
    try {
        return RegularFile::open(p.string()).read_all(kMaxJsonFileBytes);
    } catch (const Error& e) {
        throw Error(std::string("model file ") + e.what());
    }
}

// Whether an optional file of the folder is there; something that is not a regular file under its
// name is an error, not an absence.
bool present(const fs::path& p) {
    try {
        return regular_file_exists(p.string());
    } catch (const Error& e) {
        throw Error(std::string("model file ") + e.what());
    }
}

std::optional<TensorType> dtype_type(const std::string& dtype) {
    if (dtype == "F32") return TensorType::F32;
    if (dtype == "F16") return TensorType::F16;
    if (dtype == "BF16") return TensorType::BF16;
    return std::nullopt;
}

size_t dtype_bytes(TensorType t) { return t == TensorType::F32 ? 4 : 2; }

std::string shape_text(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

SafetensorsTensorInfo parse_entry(const std::string& name, const json& entry, uint64_t data_size,
                                  const std::string& what) {
    const std::string tensor = "tensor '" + name + "'";
    if (!entry.is_object()) fail(what, tensor + ": the header entry is not an object");
    SafetensorsTensorInfo info;
    info.name = name;

    const auto dtype = entry.find("dtype");
    if (dtype == entry.end() || !dtype->is_string()) fail(what, tensor + ": dtype missing or not a string");
    const std::optional<TensorType> type = dtype_type(dtype->get<std::string>());
    if (!type)
        fail(what, tensor + " has dtype " + dtype->get<std::string>() + "; only F32, F16 and BF16 are supported");
    info.type = *type;

    const auto shape = entry.find("shape");
    if (shape == entry.end() || !shape->is_array()) fail(what, tensor + ": shape missing or not an array");
    if (shape->size() > size_t(kMaxDims))
        fail(what, tensor + " has " + std::to_string(shape->size()) + " dimensions; at most " +
                       std::to_string(kMaxDims) + " are supported");
    uint64_t elements = 1;
    for (const json& d : *shape) {
        if (!d.is_number_unsigned() || d.get<uint64_t>() == 0 ||
            d.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
            fail(what, tensor + ": dimension " + d.dump() + " in its shape is not a positive integer");
        info.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
        if (__builtin_mul_overflow(elements, d.get<uint64_t>(), &elements) ||
            elements > uint64_t(std::numeric_limits<int64_t>::max()))
            fail(what, tensor + ": the element count of shape " + shape->dump() + " overflows");
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(elements, uint64_t(dtype_bytes(info.type)), &nbytes))
        fail(what, tensor + ": the byte size of shape " + shape->dump() + " overflows");

    const auto offsets = entry.find("data_offsets");
    if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned())
        fail(what, tensor + ": data_offsets is not a pair of non-negative integers");
    info.begin = (*offsets)[0].get<uint64_t>();
    info.end = (*offsets)[1].get<uint64_t>();
    if (info.begin > info.end || info.end > data_size)
        fail(what, tensor + ": data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
                       "] lie outside the data section of " + std::to_string(data_size) +
                       " bytes (truncated or corrupt)");
    if (info.end - info.begin != nbytes)
        fail(what, tensor + ": data_offsets cover " + std::to_string(info.end - info.begin) + " bytes but shape " +
                       shape_text(info.shape) + " of " + dtype->get<std::string>() + " needs " +
                       std::to_string(nbytes));
    return info;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(const uint8_t* file, size_t size, const std::string& what) {
    if (size < 8) fail(what, "truncated: " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
    uint64_t header_len = 0;
    std::memcpy(&header_len, file, 8);  // little-endian, as the format and this host are
    if (header_len > size - 8)
        fail(what, "header length " + std::to_string(header_len) + " is larger than the " +
                       std::to_string(size - 8) + " bytes left in the file (truncated or corrupt)");
    if (header_len > kMaxHeaderBytes) fail(what, "header length " + std::to_string(header_len) + " is absurd");
    if (header_len < 2) fail(what, "header length " + std::to_string(header_len) + " is too short for a JSON object");

    const std::string_view text(reinterpret_cast<const char*>(file + 8), static_cast<size_t>(header_len));
    // Three levels suffice: the object, a tensor entry, its shape.
    const json header = parse_json(text, 8, what + " (safetensors header)");
    if (!header.is_object()) fail(what, "the safetensors header is not a JSON object");

    SafetensorsHeader out;
    out.data_start = 8 + header_len;
    const uint64_t data_size = size - out.data_start;
    for (const auto& [name, entry] : header.items()) {
        if (name == "__metadata__") {
            if (!entry.is_object()) fail(what, "__metadata__ is not an object");
            continue;
        }
        out.tensors.push_back(parse_entry(name, entry, data_size, what));
    }
    std::sort(out.tensors.begin(), out.tensors.end(),
              [](const SafetensorsTensorInfo& a, const SafetensorsTensorInfo& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < out.tensors.size(); ++i)
        if (out.tensors[i - 1].end > out.tensors[i].begin)
            fail(what, "the data of tensors '" + out.tensors[i - 1].name + "' and '" + out.tensors[i].name +
                           "' overlap");
    return out;
}

std::unique_ptr<SafetensorsDir> SafetensorsDir::open(const std::string& folder) {
    const std::string where = "model folder '" + folder + "'";
    std::error_code ec;
    if (!fs::is_directory(folder, ec)) fail(where, "not a folder");
    const fs::path dir(folder);

    std::unique_ptr<SafetensorsDir> d(new SafetensorsDir());
    d->path_ = folder;

    const fs::path config_path = dir / "config.json";
    if (!present(config_path)) fail(where, "config.json is missing");
    const std::string config_what = "model file '" + config_path.string() + "'";
    const std::string config_text = read_small_file(config_path);
    d->config_ = parse_json(config_text, 64, config_what);
    if (!d->config_.is_object()) fail(config_what, "not a JSON object");

    // Shard file name -> the tensors the index places there (empty for a single file).
    std::map<std::string, std::set<std::string>> shards;
    std::unordered_map<std::string, std::string> placed;  // tensor name -> shard file name
    const fs::path index_path = dir / "model.safetensors.index.json";
    if (present(index_path)) {
        const std::string index_what = "model file '" + index_path.string() + "'";
        const json index = parse_json(read_small_file(index_path), 64, index_what);
        const auto map = index.is_object() ? index.find("weight_map") : index.end();
        if (map == index.end() || !map->is_object()) fail(index_what, "weight_map missing or not an object");
        for (const auto& [name, file] : map->items()) {
            if (!file.is_string()) fail(index_what, "weight_map entry of '" + name + "' is not a file name");
            const std::string f = file.get<std::string>();
            // The index is untrusted: shards must be plain names inside this folder.
            if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos ||
                f.find('\0') != std::string::npos)
                fail(index_what, "shard name '" + f + "' of tensor '" + name + "' is not a file in the folder");
            shards[f].insert(name);
            placed[name] = f;
        }
        if (shards.empty()) fail(index_what, "weight_map lists no tensors");
    } else if (present(dir / "model.safetensors")) {
        shards["model.safetensors"];
    } else {
        fail(where, "has neither model.safetensors nor model.safetensors.index.json");
    }

    Sha256 sha;
    sha.update(config_text.data(), config_text.size());
    for (const auto& [file, listed] : shards) {
        const std::string shard_path = (dir / file).string();
        const std::string shard_what = "model file '" + shard_path + "'";
        MappedFile map;
        try {
            map = MappedFile::open(shard_path);
        } catch (const Error& e) {
            throw Error(std::string("model file ") + e.what());
        }
        const SafetensorsHeader header = parse_safetensors_header(map.data(), map.size(), shard_what);
        sha.update(map.data(), static_cast<size_t>(header.data_start));
        std::unordered_set<std::string> held;
        for (const SafetensorsTensorInfo& info : header.tensors) {
            held.insert(info.name);
            if (!listed.empty() && !listed.count(info.name)) {
                const auto it = placed.find(info.name);
                fail(shard_what, "tensor '" + info.name + "' is here, but model.safetensors.index.json " +
                                     (it == placed.end() ? "does not list it" : "places it in " + it->second));
            }
            TensorView t;
            t.name = info.name;
            t.type = info.type;
            t.n_dims = static_cast<int>(info.shape.size());
            for (size_t i = 0; i < info.shape.size(); ++i) t.ne[i] = info.shape[info.shape.size() - 1 - i];
            t.data = map.data() + header.data_start + info.begin;
            t.nbytes = static_cast<size_t>(info.end - info.begin);
            if (!d->tensor_index_.emplace(t.name, d->tensors_.size()).second)
                fail(shard_what, "tensor '" + t.name + "' is also in another shard");
            d->tensors_.push_back(std::move(t));
        }
        for (const std::string& name : listed)
            if (!held.count(name))
                fail(shard_what, "does not hold tensor '" + name + "' that model.safetensors.index.json places there");
        d->shard_paths_.push_back(shard_path);
        d->shards_.push_back(std::move(map));
    }
    d->fingerprint_ = sha.hex_digest();

    if (present(dir / "tokenizer.model")) d->tokenizer_model_path_ = (dir / "tokenizer.model").string();
    if (present(dir / "tokenizer_config.json"))
        d->tokenizer_config_path_ = (dir / "tokenizer_config.json").string();
    return d;
}

const TensorView* SafetensorsDir::tensor(std::string_view name) const {
    const auto it = tensor_index_.find(std::string(name));
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace kvchat
