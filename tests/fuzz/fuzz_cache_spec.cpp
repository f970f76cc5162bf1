// libFuzzer target: a cache strategy spec as a user types it (--cache, the strategy panel)
// (tests/support/hostile_inputs.h says what must hold; test_fuzz_corpora replays the corpus).
#include "support/hostile_inputs.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    kvchat::test::feed_cache_spec(bytes);
    return 0;
}
