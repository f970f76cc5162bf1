#pragma once
// The one symbol libkvchat_cuda.so exports: the engine finds it with dlsym after dlopen, so the
// kvchat binaries never link the CUDA runtime or cuBLAS and start on machines without a driver.
#include <cstddef>

namespace kvchat {
class Backend;
class ThreadPool;
}  // namespace kvchat

// Bumped whenever Backend's virtual functions change: a library built against another version of
// backend.h is refused by name instead of being called through a mismatched vtable.
#define KVCHAT_CUDA_ABI 6
#define KVCHAT_CUDA_FACTORY_NAME "kvchat_cuda_backend_create"

// Creates the CUDA backend on device `device`; `pool` (host threads for what stays on the CPU) is
// the backend's from then on and is given back through release_pool when the backend is deleted.
// On failure returns null, writes the reason (one line) into error and releases nothing.
extern "C" typedef kvchat::Backend* (*kvchat_cuda_factory)(int abi, int device, kvchat::ThreadPool* pool,
                                                            void (*release_pool)(kvchat::ThreadPool*), char* error,
                                                            size_t error_size);
