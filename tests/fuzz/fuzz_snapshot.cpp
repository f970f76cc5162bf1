// libFuzzer target: a cache snapshot file, read for the tiny model; once as it is and once with
// its sections' checksums made to match, so mutations reach the parsers behind them
// (tests/support/hostile_inputs.h says what must hold; test_fuzz_corpora replays the corpus).
#include "support/hostile_inputs.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    kvchat::test::feed_snapshot(bytes);
    kvchat::test::feed_snapshot_with_fixed_crcs(bytes);
    return 0;
}
