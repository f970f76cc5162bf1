// kvchat-cli: the terminal face of the engine.
#include "engine/error.h"
#include "engine/model/gguf_file.h"
#include "engine/model/model_path.h"

#include <cstdio>
#include <string>
#include <vector>

namespace {

const char* kUsage =
    "kvchat-cli " KVCHAT_VERSION " - local chat with a persistent KV cache\n"
    "\n"
    "usage: kvchat-cli [--version] [--help] COMMAND [OPTIONS]\n"
    "\n"
    "commands:\n"
    "  info      print what the model file holds (GGUF version, tensor and metadata counts)\n"
    "\n"
    "options:\n"
    "  --model PATH   model file (default: $KVCHAT_MODEL, else\n"
    "                 ${XDG_DATA_HOME:-~/.local/share}/kvchat/models/gemma-3-270m-q4_k_m.gguf)\n"
    "  --version      print the version and exit\n"
    "  --help         print this help and exit\n";

int fail(const std::string& msg) {
    std::fprintf(stderr, "kvchat-cli: error: %s\n", msg.c_str());
    return 2;
}

int cmd_info(const std::string& model) {
    const std::string path = kvchat::resolve_model_path(model);
    const kvchat::GgufHeader h = kvchat::read_gguf_header(path);
    std::printf("model: %s\nformat: GGUF v%u\ntensors: %llu\nmetadata: %llu\nsize: %llu bytes\n", path.c_str(),
                h.version, static_cast<unsigned long long>(h.tensor_count),
                static_cast<unsigned long long>(h.metadata_count), static_cast<unsigned long long>(h.file_size));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    std::string command;
    std::string model;
    try {
        for (size_t i = 0; i < args.size(); ++i) {
            const std::string& a = args[i];
            if (a == "--help" || a == "-h") {
                std::fputs(kUsage, stdout);
                return 0;
            } else if (a == "--version") {
                std::printf("kvchat-cli %s\n", KVCHAT_VERSION);
                return 0;
            } else if (a == "--model") {
                if (i + 1 >= args.size()) return fail("--model needs a path");
                model = args[++i];
            } else if (!a.empty() && a[0] == '-') {
                return fail("unknown option '" + a + "' (see --help)");
            } else if (command.empty()) {
                command = a;
            } else {
                return fail("unexpected argument '" + a + "' (see --help)");
            }
        }
        if (command.empty()) {
            std::fputs(kUsage, stderr);
            return 2;
        }
        if (command == "info") return cmd_info(model);
        return fail("unknown command '" + command + "' (see --help)");
    } catch (const kvchat::Error& e) {
        return fail(e.what());
    }
}
