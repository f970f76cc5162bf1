#pragma once
// Where the default model lives and how a user's choice overrides it.
#include <string>

namespace kvchat {

inline constexpr const char* kDefaultModelFile = "gemma-3-270m-q4_k_m.gguf";

// ${XDG_DATA_HOME:-$HOME/.local/share}/kvchat
std::string data_dir();

// --model PATH (when non-empty) > $KVCHAT_MODEL > data_dir()/models/<default file>.
std::string resolve_model_path(const std::string& cli_model);

}  // namespace kvchat
