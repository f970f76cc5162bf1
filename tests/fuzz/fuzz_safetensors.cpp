// libFuzzer target: any byte string parsed as a .safetensors file must be refused with
// kvchat::Error or give tensors whose byte ranges lie inside the data section.
#include "engine/error.h"
#include "engine/model/safetensors_dir.h"

#include <cstdint>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const kvchat::SafetensorsHeader h = kvchat::parse_safetensors_header(data, size, "fuzz");
        uint64_t previous_end = 0;
        for (const kvchat::SafetensorsTensorInfo& t : h.tensors) {
            if (t.begin > t.end || h.data_start + t.end > size || t.begin < previous_end || t.shape.size() > 4)
                std::abort();
            previous_end = t.end;
        }
    } catch (const kvchat::Error&) {
    }
    return 0;
}
