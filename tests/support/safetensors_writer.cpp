#include "support/safetensors_writer.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace kvchat::test {

std::string safetensors_bytes_raw(const std::string& header_json, const std::string& data) {
    const uint64_t n = header_json.size();
    std::string out(8, '\0');
    std::memcpy(out.data(), &n, 8);
    return out + header_json + data;
}

std::string safetensors_bytes(const std::vector<SafetensorsTensorSpec>& tensors) {
    nlohmann::json header = nlohmann::json::object();
    header["__metadata__"] = {{"format", "pt"}};
    std::string data;
    for (const SafetensorsTensorSpec& t : tensors) {
        header[t.name] = {{"dtype", t.dtype},
                          {"shape", t.shape},
                          {"data_offsets", {data.size(), data.size() + t.data.size()}}};
        data += t.data;
    }
    std::string text = header.dump();
    text.resize((text.size() + 7) / 8 * 8, ' ');
    return safetensors_bytes_raw(text, data);
}

void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
    if (!f) throw std::runtime_error("cannot write " + path);
}

std::vector<std::string> write_safetensors_folder(const std::string& dir, const std::string& config_json,
                                                  const std::vector<SafetensorsTensorSpec>& tensors, int shards) {
    write_file(dir + "/config.json", config_json);
    if (shards <= 1) {
        write_file(dir + "/model.safetensors", safetensors_bytes(tensors));
        return {"model.safetensors"};
    }
    std::vector<std::string> names;
    nlohmann::json weight_map = nlohmann::json::object();
    size_t total = 0;
    for (int k = 0; k < shards; ++k) {
        char name[64];
        std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, shards);
        const size_t from = tensors.size() * size_t(k) / size_t(shards);
        const size_t to = tensors.size() * size_t(k + 1) / size_t(shards);
        const std::vector<SafetensorsTensorSpec> part(tensors.begin() + long(from), tensors.begin() + long(to));
        for (const SafetensorsTensorSpec& t : part) {
            weight_map[t.name] = name;
            total += t.data.size();
        }
        write_file(dir + "/" + name, safetensors_bytes(part));
        names.push_back(name);
    }
    const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file(dir + "/model.safetensors.index.json", index.dump(2));
    return names;
}

}  // namespace kvchat::test
