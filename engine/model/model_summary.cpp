#include "engine/model/model_summary.h"

#include "engine/error.h"
#include "engine/format/gguf_file.h"
#include "engine/model/model.h"
#include "engine/model/safetensors_dir.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <vector>

namespace kvchat {

namespace {

bool is_directory(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

uint64_t file_bytes(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

std::string last_component(std::string path) {
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Parameters and the type that holds most of them (ties: the first met, in file order).
void count_parameters(const std::vector<TensorView>& tensors, ModelSummary& s) {
    std::map<TensorType, uint64_t> by_type;
    std::vector<TensorType> order;
    for (const TensorView& t : tensors) {
        const auto n = static_cast<uint64_t>(t.elements());
        s.parameters += n;
        if (by_type.find(t.type) == by_type.end()) order.push_back(t.type);
        by_type[t.type] += n;
    }
    uint64_t most = 0;
    for (TensorType t : order)
        if (by_type[t] > most) {
            most = by_type[t];
            s.dominant_type = std::string(traits(t).name);
        }
    // Upper case, as llama.cpp and gguf-py name the types ("Q4_K").
    for (char& c : s.dominant_type) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
}

ModelSummary summarise_gguf(const std::string& path) {
    const auto f = GgufFile::open(path);
    ModelSummary s;
    s.path = path;
    s.format = "gguf";
    s.file_bytes = f->file_size();
    s.architecture = f->get_string("general.architecture", "");
    s.architecture_supported = gguf_architecture(s.architecture).has_value();
    std::string file = last_component(path);
    if (file.size() > 5 && file.compare(file.size() - 5, 5, ".gguf") == 0) file.resize(file.size() - 5);
    s.name = f->get_string("general.name", "");
    if (s.name.empty()) s.name = file;
    if (f->find("general.file_type")) s.file_type = file_type_name(f->get_uint("general.file_type"));
    if (!s.architecture.empty()) {
        s.context_length = f->get_uint(s.architecture + ".context_length", 0);
        s.layers = static_cast<int>(std::min<uint64_t>(f->get_uint(s.architecture + ".block_count", 0), 1u << 20));
    }
    s.vocabulary = f->get_string("tokenizer.ggml.model", "");
    s.pre_tokenizer = f->get_string("tokenizer.ggml.pre", "");
    if (const GgufValue* tokens = f->find("tokenizer.ggml.tokens")) {
        if (tokens->type != GgufType::ARRAY)
            throw Error("model file '" + path + "': tokenizer.ggml.tokens is not an array");
        s.vocabulary_size = std::get<std::shared_ptr<GgufArray>>(tokens->v)->items.size();
    }
    s.chat_template = !f->get_string("tokenizer.chat_template", "").empty();
    count_parameters(f->tensors(), s);
    return s;
}

ModelSummary summarise_folder(const std::string& dir) {
    const auto d = SafetensorsDir::open(dir);
    ModelSummary s;
    s.path = dir;
    s.format = "safetensors";
    s.name = last_component(dir);
    nlohmann::json cfg = d->config();
    auto text = [&](const nlohmann::json& j, const char* key) {
        return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
    };
    auto count = [&](const nlohmann::json& j, const char* key) -> uint64_t {
        return j.contains(key) && j[key].is_number_unsigned() ? j[key].get<uint64_t>() : 0;
    };
    s.architecture = text(cfg, "model_type");
    s.architecture_supported = hf_architecture(s.architecture).has_value();
    // Gemma 3's multimodal folders keep the language model's numbers in text_config.
    if (cfg.contains("text_config") && cfg["text_config"].is_object()) cfg = cfg["text_config"];
    s.context_length = count(cfg, "max_position_embeddings");
    s.layers = static_cast<int>(std::min<uint64_t>(count(cfg, "num_hidden_layers"), 1u << 20));
    s.vocabulary_size = count(cfg, "vocab_size");
    if (!d->tokenizer_model_path().empty()) s.vocabulary = "llama";  // tokenizer.model: SentencePiece
    if (!d->tokenizer_config_path().empty()) {
        std::ifstream in(d->tokenizer_config_path());
        const nlohmann::json tc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
        s.chat_template = tc.is_object() && tc.contains("chat_template") && !tc["chat_template"].is_null();
    }
    for (const std::string& shard : d->shard_paths()) s.file_bytes += file_bytes(shard);
    count_parameters(d->tensors(), s);
    return s;
}

}  // namespace

ModelSummary summarise_model(const std::string& path) {
    return is_directory(path) ? summarise_folder(path) : summarise_gguf(path);
}

std::string file_type_name(uint64_t t) {
    // llama.cpp's llama_ftype, without its MOSTLY_ prefix; the gaps are numbers it retired.
    static const std::map<uint64_t, const char*> kNames = {
        {0, "F32"},      {1, "F16"},      {2, "Q4_0"},     {3, "Q4_1"},      {7, "Q8_0"},      {8, "Q5_0"},
        {9, "Q5_1"},     {10, "Q2_K"},    {11, "Q3_K_S"},  {12, "Q3_K_M"},   {13, "Q3_K_L"},   {14, "Q4_K_S"},
        {15, "Q4_K_M"},  {16, "Q5_K_S"},  {17, "Q5_K_M"},  {18, "Q6_K"},     {19, "IQ2_XXS"},  {20, "IQ2_XS"},
        {21, "Q2_K_S"},  {22, "IQ3_XS"},  {23, "IQ3_XXS"}, {24, "IQ1_S"},    {25, "IQ4_NL"},   {26, "IQ3_S"},
        {27, "IQ3_M"},   {28, "IQ2_S"},   {29, "IQ2_M"},   {30, "IQ4_XS"},   {31, "IQ1_M"},    {32, "BF16"},
        {36, "TQ1_0"},   {37, "TQ2_0"},   {38, "MXFP4_MOE"}, {39, "NVFP4"},    {40, "Q1_0"}};
    const auto it = kNames.find(t);
    return it == kNames.end() ? std::string() : it->second;
}

std::string vocabulary_kind(const std::string& tokenizer_model) {
    if (tokenizer_model == "llama") return "SentencePiece";
    if (tokenizer_model == "gpt2") return "byte-level BPE";
    return tokenizer_model;
}

}  // namespace kvchat
