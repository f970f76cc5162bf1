#pragma once
// UTF-8 validation with replacement, shared by decoding and streaming detokenization.
#include <string>
#include <string_view>

namespace kvchat {

// Appends `bytes` to `out` as valid UTF-8: every maximal invalid subpart (Unicode's "best
// practice" for U+FFFD substitution) becomes U+FFFD. An incomplete but so far valid sequence at
// the end is left unconsumed unless `at_end`, so a caller can wait for its remaining bytes.
// Returns how many bytes of `bytes` were consumed.
size_t append_valid_utf8(std::string_view bytes, bool at_end, std::string& out);

// (is_valid_utf8 lives in engine/common/utf8.h, shared with the store.)

}  // namespace kvchat
