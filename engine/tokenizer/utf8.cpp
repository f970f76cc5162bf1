#include "engine/tokenizer/utf8.h"

namespace kvchat {

namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
}

size_t append_valid_utf8(std::string_view s, bool at_end, std::string& out) {
    const size_t n = s.size();
    size_t i = 0;
    while (i < n) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x80) {
            out.push_back(static_cast<char>(c));
            ++i;
            continue;
        }
        // Sequence length and the allowed range of the second byte, which excludes overlong
        // forms, surrogates and code points past U+10FFFF.
        size_t len = 0;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else {
            out.append(kReplacement);  // a stray continuation byte or a byte that never starts one
            ++i;
            continue;
        }
        size_t k = 1;
        for (; k < len && i + k < n; ++k) {
            const auto b = static_cast<unsigned char>(s[i + k]);
            if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
        }
        if (k == len) {
            out.append(s.substr(i, len));
        } else if (i + k == n && !at_end) {
            return i;  // the rest may still arrive
        } else {
            out.append(kReplacement);
        }
        i += k;
    }
    return n;
}

}  // namespace kvchat
