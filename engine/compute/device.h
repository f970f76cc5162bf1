#pragma once
// Where the engine computes: the CPU, or a CUDA GPU through libkvchat_cuda.so, which is loaded
// at run time so one build starts on machines without a GPU, driver or CUDA runtime.
#include "engine/compute/backend.h"

#include <memory>
#include <optional>
#include <string>

namespace kvchat {

struct Device {
    enum class Kind { Cpu, Cuda } kind = Kind::Cpu;
    int index = 0;  // the CUDA device number
};

// "cpu", "cuda" (device 0) or "cuda:N"; nullopt for anything else.
std::optional<Device> parse_device(const std::string& text);
std::string device_name(const Device& d);  // the text parse_device reads back

struct OpenedBackend {
    std::unique_ptr<Backend> backend;
    // Empty when the backend asked for is the one opened; otherwise one line saying why it could
    // not be and that the CPU is used instead.
    std::string notice;
};

// The backend for `device` with n_threads host threads (<= 0: one per core). A CUDA device that
// cannot be used (no library, no driver, no such GPU) gives the CPU backend and a notice; this
// never throws for that.
OpenedBackend open_backend(const Device& device, int n_threads);

// Where libkvchat_cuda.so is looked for, first match wins: $KVCHAT_CUDA_LIBRARY, then beside
// the running program (its folder, ../lib, ../lib/kvchat).
std::string cuda_library_path();

}  // namespace kvchat
