// Writes the fuzzers' seed corpus: tiny valid GGUF files (v2 and v3, every metadata type, several
// tensor types and alignments) and .safetensors files. Usage: fuzz_seed_corpus OUT_DIR
#include "support/gguf_writer.h"
#include "support/safetensors_writer.h"

#include <cstdio>
#include <filesystem>

using namespace kvchat;
using namespace kvchat::test;

namespace {

std::string bytes_of(size_t n, uint8_t seed) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = char(uint8_t(seed + 13 * i));
    return s;
}

GgufWriter every_type(uint32_t version, uint32_t alignment) {
    GgufWriter w(version, alignment);
    w.add_string("general.architecture", "tiny");
    w.add("a.u8", gguf_uint(GgufType::UINT8, 7));
    w.add("a.i8", gguf_int(GgufType::INT8, -7));
    w.add("a.u16", gguf_uint(GgufType::UINT16, 700));
    w.add("a.i16", gguf_int(GgufType::INT16, -700));
    w.add("a.u32", gguf_uint(GgufType::UINT32, 70000));
    w.add("a.i32", gguf_int(GgufType::INT32, -70000));
    w.add("a.u64", gguf_uint(GgufType::UINT64, 7000000000));
    w.add("a.i64", gguf_int(GgufType::INT64, -7000000000));
    w.add("a.f32", gguf_float(GgufType::FLOAT32, 0.5));
    w.add("a.f64", gguf_float(GgufType::FLOAT64, 0.25));
    w.add_bool("a.bool", true);
    w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a"});
    w.add_float32_array("tokenizer.ggml.scores", {0.f, 0.f, 0.f, -1.f});
    w.add_int32_array("tokenizer.ggml.token_type", {2, 3, 3, 1});
    w.add("a.nested", gguf_array(GgufType::ARRAY, {gguf_array(GgufType::UINT8, {gguf_uint(GgufType::UINT8, 1)}),
                                                    gguf_array(GgufType::STRING, {gguf_string("x")})}));
    return w;
}

void save(const std::filesystem::path& p, const std::string& bytes) {
    write_file(p.string(), bytes);
    std::printf("%s: %zu bytes\n", p.c_str(), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
        return 2;
    }
    const std::filesystem::path out(argv[1]);
    std::filesystem::create_directories(out / "gguf");
    std::filesystem::create_directories(out / "safetensors");

    GgufWriter v3 = every_type(3, 32);
    v3.add_tensor({"token_embd.weight", uint32_t(TensorType::F32), {4, 2}, bytes_of(32, 1), {}});
    v3.add_tensor({"blk.0.attn_q.weight", uint32_t(TensorType::Q8_0), {32, 2}, bytes_of(68, 2), {}});
    save(out / "gguf" / "every_type_v3.gguf", v3.bytes());

    GgufWriter v2 = every_type(2, 64);
    v2.add_tensor({"a", uint32_t(TensorType::F16), {3, 1, 2}, bytes_of(12, 3), {}});
    v2.add_tensor({"b", uint32_t(TensorType::Q4_K), {256}, bytes_of(144, 4), {}});
    v2.add_tensor({"c", uint32_t(TensorType::BF16), {2, 2, 2, 2}, bytes_of(32, 5), {}});
    save(out / "gguf" / "every_type_v2_align64.gguf", v2.bytes());

    GgufWriter quant(3, 8);
    quant.add_string("general.architecture", "q");
    for (TensorType t : {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q6_K})
        quant.add_tensor({"t" + std::to_string(uint32_t(t)), uint32_t(t), {256}, bytes_of(256, uint8_t(t)), {}});
    save(out / "gguf" / "quant_types_align8.gguf", quant.bytes());

    GgufWriter metadata_only(3);
    metadata_only.add_string("general.architecture", "none");
    metadata_only.add_uint32("general.alignment", 16);
    save(out / "gguf" / "metadata_only.gguf", metadata_only.bytes());

    save(out / "safetensors" / "three.safetensors",
         safetensors_bytes({{"w", "F32", {2, 3}, bytes_of(24, 1)},
                            {"h", "F16", {4}, bytes_of(8, 2)},
                            {"b", "BF16", {1, 2, 1, 2}, bytes_of(8, 3)}}));
    save(out / "safetensors" / "scalar.safetensors", safetensors_bytes({{"s", "F32", {}, bytes_of(4, 4)}}));
    return 0;
}
