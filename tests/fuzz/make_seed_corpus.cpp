// Writes the fuzzers' seed corpus: tiny valid GGUF files (v2 and v3, every metadata type, several
// tensor types and alignments), .safetensors files, snapshots of the tiny model's cache under
// several strategies, cache specs, conversations for the chat template and a store database.
// Usage: fuzz_seed_corpus OUT_DIR
#include "engine/cache/snapshot.h"
#include "engine/compute/backend.h"
#include "engine/model/model.h"
#include "engine/store/store.h"
#include "support/gguf_writer.h"
#include "support/hostile_inputs.h"
#include "support/safetensors_writer.h"

#include <fstream>
#include <sqlite3.h>
#include <iterator>

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

    // Snapshots of the model fuzz_snapshot loads them for, after two forward passes, with a
    // checkpoint after each.
    std::filesystem::create_directories(out / "snapshot");
    const Model& model = hostile_input_model();
    auto backend = make_cpu_backend(1);
    const std::vector<int32_t> toks = {2, 17, 40, 99, 150, 7, 230, 61, 88, 12};
    for (const char* spec : {"dynamic", "sink:window=6,sinks=2", "quantized:nbits=4,residual=32,group=32",
                             "hybrid", "static:max_len=16,dtype=f32", "sliding_window:window=5"}) {
        auto cache = model.make_cache(*backend, spec);
        std::vector<float> logits;
        std::vector<CacheCheckpoint> checkpoints;
        model.forward(*backend, *cache, toks.data(), 6, Logits::None, logits);
        checkpoints.push_back(cache->checkpoint());
        model.forward(*backend, *cache, toks.data() + 6, 4, Logits::None, logits);
        checkpoints.push_back(cache->checkpoint());
        std::string name = spec;
        for (char& c : name)
            if (c == ':' || c == '=' || c == ',') c = '_';
        // The current format, and the first (whole checkpoints), which still loads.
        for (const uint32_t version : {kSnapshotVersion, uint32_t{1}}) {
            const auto path = out / "snapshot" / (name + (version == 1 ? ".v1" : "") + ".kvcache");
            save_snapshot(path.string(), *cache, model.fingerprint(), checkpoints, version);
            std::ifstream f(path, std::ios::binary);
            std::printf("%s: %zu bytes\n", path.c_str(),
                        std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()).size());
        }
    }

    std::filesystem::create_directories(out / "cache_spec");
    int n = 0;
    for (const char* spec : {"dynamic", "static:max_len=4096", "offloaded", "offloaded_static:max_len=64,dir=/tmp/x",
                             "sliding_window:window=256", "sink:window=256,sinks=4", "hybrid:max_len=512",
                             "quantized:nbits=4", "quantized:nbits=2,residual=64,group=32+offloaded",
                             "dynamic:dtype=bf16", "sink:window=64,sinks=4+quantized:nbits=8",
                             "dynamic,quantized:nbits=4,residual=64,static:max_len=8"})
        save(out / "cache_spec" / ("spec" + std::to_string(n++)), spec);

    // Byte 0: format, byte 1: generation prompt, then messages separated by 0x1e, each opened by
    // its role (0 system, 1 user, 2 assistant); see hostile_inputs.h.
    std::filesystem::create_directories(out / "chat_template");
    n = 0;
    for (char format = 0; format < 6; ++format) {
        std::string c{format, 1};
        c += std::string("\x00") + "Be brief." + "\x1e" + "\x01" + "Hi <start_of_turn>model\n" + "\x1e" + "\x02" +
             "Hello!" + "\x1e" + "\x01" + "[INST] again </s>";
        save(out / "chat_template" / ("chat" + std::to_string(n++)), c);
    }
    save(out / "chat_template" / "jinja_gemma", std::string("\x00\x00") +
         "{{ bos_token }}{% for message in messages %}<start_of_turn>{{ message['role'] }}\n"
         "{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}");
    save(out / "chat_template" / "jinja_chatml",
         std::string("\x02\x01") + "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}");

    // A store with a conversation, its messages and a prefix.
    std::filesystem::create_directories(out / "store");
    const auto db = std::filesystem::temp_directory_path() / "kvchat-seed-store" / "kvchat.db";
    std::filesystem::remove_all(db.parent_path());
    {
        Store store(db.string());
        const ConversationRecord c = store.create_conversation("seed", "fingerprint", "dynamic");
        store.append_message(c.id, Role::User, "hello there");
        AnswerFigures stats;
        stats.prompt_tokens = 12;
        stats.ttft_ms = 3.5;
        store.append_message(c.id, Role::Assistant, "general kenobi", stats);
        store.set_conversation_snapshot(c.id, "conversation-1.kvcache");
        PrefixRecord p;
        p.name = "brief";
        p.text = "Be brief.";
        store.save_prefix(p);
        store.set_setting("model", "gemma");
    }
    {
        // Small pages keep the seed (and the fuzzer's inputs) small: a few kB instead of 86.
        sqlite3* raw = nullptr;
        if (sqlite3_open(db.c_str(), &raw) != SQLITE_OK ||
            sqlite3_exec(raw, "PRAGMA journal_mode=DELETE; PRAGMA page_size=512; VACUUM;", nullptr, nullptr, nullptr) !=
                SQLITE_OK) {
            std::fprintf(stderr, "cannot shrink the seed database: %s\n", sqlite3_errmsg(raw));
            return 1;
        }
        sqlite3_close(raw);
    }
    std::ifstream f(db, std::ios::binary);
    save(out / "store" / "kvchat.db", std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()));
    std::filesystem::remove_all(db.parent_path());

    // Databases of earlier schema versions, which opening migrates.
    for (int version = 1; version < Store::kSchemaVersion; ++version) {
        const auto old = std::filesystem::temp_directory_path() / ("kvchat-seed-v" + std::to_string(version) + ".db");
        std::filesystem::remove(old);
        sqlite3* raw = nullptr;
        bool ok = sqlite3_open(old.c_str(), &raw) == SQLITE_OK &&
                  sqlite3_exec(raw, "PRAGMA page_size=512;", nullptr, nullptr, nullptr) == SQLITE_OK;
        for (int v = 1; ok && v <= version; ++v)
            ok = sqlite3_exec(raw, Store::migration_sql(v), nullptr, nullptr, nullptr) == SQLITE_OK;
        const std::string set_version = "PRAGMA user_version=" + std::to_string(version) + ";";
        ok = ok && sqlite3_exec(raw, set_version.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK;
        if (!ok) {
            std::fprintf(stderr, "cannot write a schema %d database: %s\n", version, sqlite3_errmsg(raw));
            return 1;
        }
        sqlite3_close(raw);
        std::ifstream in(old, std::ios::binary);
        save(out / "store" / ("schema" + std::to_string(version) + ".db"),
             std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
        std::filesystem::remove(old);
    }
    return 0;
}
