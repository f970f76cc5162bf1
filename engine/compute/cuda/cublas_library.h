#pragma once
// cuBLAS, opened with dlopen by the CUDA backend instead of linked: libkvchat_cuda.so then needs
// nothing from CUDA at load time but the driver (the runtime is linked statically), so the
// Debian package depends on no CUDA package, and a machine without cuBLAS gets a message naming
// the library rather than a loader error.
#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>

namespace kvchat::cuda {

class CublasLibrary {
public:
    using Create = cublasStatus_t (*)(cublasHandle_t*);
    using Destroy = cublasStatus_t (*)(cublasHandle_t);
    using SetStream = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);
    using StatusString = const char* (*)(cublasStatus_t);
    using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                      const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                      cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

    Create create = nullptr;
    Destroy destroy = nullptr;
    SetStream set_stream = nullptr;
    StatusString status_string = nullptr;
    GemmEx gemm_ex = nullptr;

    // The cuBLAS of the major version this library was compiled against; the process keeps it
    // loaded. error says why when it cannot be opened (and the result is then unusable).
    static const CublasLibrary& get() {
        static const CublasLibrary lib = open();
        return lib;
    }
    bool ok() const { return error.empty(); }
    std::string error;

private:
    static CublasLibrary open() {
        CublasLibrary lib;
        const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
        void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char* e = dlerror();
            lib.error = "cannot load " + name + " (cuBLAS " + std::to_string(CUBLAS_VER_MAJOR) + "): " + (e ? e : "not found");
            return lib;
        }
        auto sym = [&](auto& fn, const char* symbol) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, symbol));
            if (!fn && lib.error.empty()) lib.error = name + " has no " + symbol;
        };
        sym(lib.create, "cublasCreate_v2");
        sym(lib.destroy, "cublasDestroy_v2");
        sym(lib.set_stream, "cublasSetStream_v2");
        sym(lib.status_string, "cublasGetStatusString");
        sym(lib.gemm_ex, "cublasGemmEx");
        return lib;
    }
};

}  // namespace kvchat::cuda
