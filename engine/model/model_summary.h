#pragma once
// What a model file is, read from its metadata alone (no weights are touched, nothing is loaded):
// the rows of the window's Models view. Reading a GGUF maps the file and parses its header,
// metadata and tensor table, so a 250 MB model costs a few milliseconds and almost no memory.
#include <cstdint>
#include <string>

namespace kvchat {

struct ModelSummary {
    std::string path;
    std::string name;               // general.name, else the file name without ".gguf"
    std::string format;             // "gguf" or "safetensors" (a Hugging Face folder)
    std::string architecture;       // general.architecture ("llama", "gemma3", ...); config.json's model_type
    bool architecture_supported = false;  // kvchat has a forward pass for it
    uint64_t parameters = 0;        // elements of every tensor
    std::string file_type;          // general.file_type as llama.cpp names it ("Q4_K_M"); empty: not stated
    std::string dominant_type;      // the tensor type holding the most parameters ("Q4_K")
    uint64_t context_length = 0;    // <arch>.context_length (max_position_embeddings); 0: not stated
    int layers = 0;                 // <arch>.block_count (num_hidden_layers); 0: not stated
    uint64_t file_bytes = 0;        // the file, or every file of the folder's model
    std::string vocabulary;         // tokenizer.ggml.model ("llama", "gpt2"); "" when absent
    std::string pre_tokenizer;      // tokenizer.ggml.pre ("smollm", "qwen2"); "" when absent
    uint64_t vocabulary_size = 0;   // entries of tokenizer.ggml.tokens (config.json's vocab_size)
    bool chat_template = false;     // the file carries a chat template
};

// Reads a GGUF file or a Hugging Face folder. Throws kvchat::Error naming the path and what is
// wrong (missing, not a model file, truncated, a metadata value of the wrong kind).
ModelSummary summarise_model(const std::string& path);

// llama.cpp's name of a general.file_type value ("Q4_K_M" for 15); "" for a value it does not name.
std::string file_type_name(uint64_t file_type);

// The vocabulary in words: "SentencePiece", "byte-level BPE", or the file's own name for others.
std::string vocabulary_kind(const std::string& tokenizer_model);

}  // namespace kvchat
