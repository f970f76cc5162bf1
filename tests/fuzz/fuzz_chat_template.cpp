// libFuzzer target: a conversation rendered by the chat template of each format, and a Jinja
// template to recognise
// (tests/support/hostile_inputs.h says what must hold; test_fuzz_corpora replays the corpus).
#include "support/hostile_inputs.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    kvchat::test::feed_chat_template(bytes);
    return 0;
}
