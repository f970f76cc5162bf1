// libFuzzer target: any byte string handed to GgufFile::open (through a memfd, so the real mmap
// path runs) must be refused with kvchat::Error or opened into something whose every getter,
// tensor range and fingerprint is safe to use.
#include "engine/error.h"
#include "engine/format/gguf_file.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

template <class F>
void tolerate_refusal(F&& f) {
    try {
        f();
    } catch (const kvchat::Error&) {
    }
}

void exercise(const kvchat::GgufFile& f) {
    volatile uint64_t sink = 0;
    check(f.fingerprint().size() == 64);
    for (const auto& pair : f.metadata()) {
        const std::string& key = pair.first;  // clang 14 cannot capture structured bindings
        check(f.find(key) != nullptr);
        tolerate_refusal([&] { sink = sink + f.get_uint(key); });
        tolerate_refusal([&] { sink = sink + uint64_t(f.get_float(key) != 0.0); });
        tolerate_refusal([&] { sink = sink + f.get_bool(key, false); });
        tolerate_refusal([&] { sink = sink + f.get_string(key).size(); });
        tolerate_refusal([&] { sink = sink + f.get_array(key).items.size(); });
    }
    tolerate_refusal([&] { sink = sink + f.get_uint("general.alignment", 32); });
    for (const kvchat::TensorView& t : f.tensors()) {
        check(f.tensor(t.name) == &t);
        check(t.nbytes > 0 && t.n_dims >= 0 && t.n_dims <= 4 && t.elements() > 0);
        // Reading every byte proves the range lies inside the mapping (a stray one faults).
        const auto* p = static_cast<const uint8_t*>(t.data);
        uint64_t sum = 0;
        for (size_t i = 0; i < t.nbytes; ++i) sum += p[i];
        sink = sink + sum;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const int fd = memfd_create("fuzz.gguf", MFD_CLOEXEC);
    static const std::string path = "/proc/self/fd/" + std::to_string(fd);
    check(fd >= 0);
    check(ftruncate(fd, 0) == 0);
    for (size_t done = 0; done < size;) {
        const ssize_t n = pwrite(fd, data + done, size - done, off_t(done));
        check(n > 0);
        done += size_t(n);
    }
    tolerate_refusal([&] { kvchat::read_gguf_header(path); });
    tolerate_refusal([&] { exercise(*kvchat::GgufFile::open(path)); });
    return 0;
}
