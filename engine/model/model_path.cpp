#include "engine/model/model_path.h"

#include <cstdlib>

namespace kvchat {

std::string data_dir() {
    const char* xdg = std::getenv("XDG_DATA_HOME");
    if (xdg && *xdg) return std::string(xdg) + "/kvchat";
    const char* home = std::getenv("HOME");
    return std::string(home && *home ? home : ".") + "/.local/share/kvchat";
}

std::string resolve_model_path(const std::string& cli_model) {
    if (!cli_model.empty()) return cli_model;
    const char* env = std::getenv("KVCHAT_MODEL");
    if (env && *env) return env;
    return data_dir() + "/models/" + kDefaultModelFile;
}

}  // namespace kvchat
