#include "engine/compute/device.h"

#include "engine/compute/cuda/cuda_factory.h"
#include "engine/compute/thread_pool.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

namespace kvchat {

namespace {

constexpr const char* kLibraryName = "libkvchat_cuda.so";

std::string program_folder() {
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::string() : exe.parent_path().string();
}

void release_pool(ThreadPool* pool) { delete pool; }

// The library stays loaded for the life of the process: backends it made may outlive any caller.
struct LoadedLibrary {
    kvchat_cuda_factory factory = nullptr;
    std::string error;
};

const LoadedLibrary& cuda_library() {
    static LoadedLibrary lib;
    static std::once_flag once;
    std::call_once(once, [] {
        const std::string path = cuda_library_path();
        if (path.empty()) {
            lib.error = "this build of kvchat has no CUDA backend (" + std::string(kLibraryName) + " not found)";
            return;
        }
        void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char* e = dlerror();
            lib.error = "cannot load " + path + ": " + (e ? e : "unknown error");
            return;
        }
        lib.factory = reinterpret_cast<kvchat_cuda_factory>(dlsym(h, KVCHAT_CUDA_FACTORY_NAME));
        if (!lib.factory) lib.error = path + " is not a kvchat CUDA backend (no " KVCHAT_CUDA_FACTORY_NAME ")";
    });
    return lib;
}

}  // namespace

std::optional<Device> parse_device(const std::string& text) {
    if (text == "cpu") return Device{};
    if (text == "cuda") return Device{Device::Kind::Cuda, 0};
    if (text.rfind("cuda:", 0) == 0 && text.size() > 5 && text.size() <= 8) {
        int n = 0;
        for (size_t i = 5; i < text.size(); ++i) {
            if (text[i] < '0' || text[i] > '9') return std::nullopt;
            n = n * 10 + (text[i] - '0');
        }
        return Device{Device::Kind::Cuda, n};
    }
    return std::nullopt;
}

std::string device_name(const Device& d) {
    if (d.kind == Device::Kind::Cpu) return "cpu";
    return d.index == 0 ? "cuda" : "cuda:" + std::to_string(d.index);
}

std::string cuda_library_path() {
    if (const char* env = std::getenv("KVCHAT_CUDA_LIBRARY"); env && *env) return env;
    const std::string dir = program_folder();
    if (dir.empty()) return {};
    for (const char* rel : {"", "/../lib", "/../lib/kvchat"}) {
        const std::string p = dir + rel + "/" + kLibraryName;
        if (access(p.c_str(), R_OK) == 0) return p;
    }
    return {};
}

OpenedBackend open_backend(const Device& device, int n_threads) {
    OpenedBackend r;
    if (device.kind == Device::Kind::Cuda) {
        const LoadedLibrary& lib = cuda_library();
        std::string why = lib.error;
        if (lib.factory) {
            auto* pool = new ThreadPool(n_threads);
            char error[512] = {};
            Backend* b = lib.factory(KVCHAT_CUDA_ABI, device.index, pool, &release_pool, error, sizeof(error));
            if (b) {
                r.backend.reset(b);
                return r;
            }
            delete pool;
            why = error[0] ? error : "the CUDA backend could not start";
        }
        for (char& c : why)
            if (c == '\n') c = ' ';
        r.notice = "CUDA device " + std::to_string(device.index) + " is not usable: " + why + "; using the CPU";
    }
    r.backend = make_cpu_backend(n_threads);
    return r;
}

}  // namespace kvchat
