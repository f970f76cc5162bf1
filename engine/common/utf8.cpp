#include "engine/common/utf8.h"

#include <cstddef>
#include <cstdint>

namespace kvchat {

namespace {

// Length of the well-formed sequence starting at text[i], or 0 when the sequence is ill-formed;
// `subpart` then receives the length of its maximal subpart (at least 1), the bytes one U+FFFD
// stands for. The ranges are those of Unicode table 3-7.
size_t sequence_length(std::string_view text, size_t i, size_t& subpart) {
    const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
    const uint8_t lead = byte(i);
    subpart = 1;
    if (lead < 0x80) return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (lead >= 0xC2 && lead <= 0xDF) {
        need = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        need = 3;
        if (lead == 0xE0) lo = 0xA0;       // below is overlong
        else if (lead == 0xED) hi = 0x9F;  // above is a surrogate
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        need = 4;
        if (lead == 0xF0) lo = 0x90;       // below is overlong
        else if (lead == 0xF4) hi = 0x8F;  // above is beyond U+10FFFF
    } else {
        return 0;  // continuation byte, C0, C1 or F5..FF: never a lead
    }
    for (size_t k = 1; k < need; ++k) {
        if (i + k >= text.size()) return 0;  // truncated: the bytes so far are the subpart
        const uint8_t b = byte(i + k);
        const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
        if (!ok) return 0;
        subpart = k + 1;
    }
    return need;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
    size_t i = 0;
    while (i < text.size()) {
        // ASCII runs are the common case; skip them without the table.
        if (static_cast<uint8_t>(text[i]) < 0x80) {
            ++i;
            continue;
        }
        size_t subpart;
        const size_t n = sequence_length(text, i, subpart);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

size_t append_valid_utf8(std::string_view text, bool at_end, std::string& out) {
    size_t i = 0;
    while (i < text.size()) {
        size_t subpart;
        const size_t n = sequence_length(text, i, subpart);
        if (n > 0) {
            out.append(text.substr(i, n));
            i += n;
        } else if (!at_end && i + subpart == text.size() && static_cast<uint8_t>(text[i]) >= 0xC2 &&
                   static_cast<uint8_t>(text[i]) <= 0xF4) {
            return i;  // a valid start of a character whose remaining bytes may still arrive
        } else {
            out.append("\xEF\xBF\xBD");
            i += subpart;
        }
    }
    return text.size();
}

RepairedUtf8 repair_utf8(std::string_view text) {
    RepairedUtf8 out;
    if (is_valid_utf8(text)) {
        out.text.assign(text);
        return out;
    }
    out.text.reserve(text.size() + 16);
    append_valid_utf8(text, true, out.text);
    out.replaced = true;
    return out;
}

size_t white_space_at(std::string_view text, size_t i) {
    const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
    if (i >= text.size()) return 0;
    const unsigned char c = byte(i);
    if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return 1;
    if (c == 0xC2 && i + 1 < text.size() && (byte(i + 1) == 0x85 || byte(i + 1) == 0xA0)) return 2;  // U+0085, U+00A0
    if (c == 0xE1 && i + 2 < text.size() && byte(i + 1) == 0x9A && byte(i + 2) == 0x80) return 3;    // U+1680
    if (c == 0xE2 && i + 2 < text.size() && byte(i + 1) == 0x80 &&
        ((byte(i + 2) >= 0x80 && byte(i + 2) <= 0x8A) || byte(i + 2) == 0xA8 || byte(i + 2) == 0xA9 || byte(i + 2) == 0xAF))
        return 3;  // U+2000..U+200A, U+2028, U+2029, U+202F
    if (c == 0xE2 && i + 2 < text.size() && byte(i + 1) == 0x81 && byte(i + 2) == 0x9F) return 3;  // U+205F
    if (c == 0xE3 && i + 2 < text.size() && byte(i + 1) == 0x80 && byte(i + 2) == 0x80) return 3;  // U+3000
    return 0;
}

bool is_blank_text(std::string_view text) {
    size_t i = 0;
    while (i < text.size()) {
        const size_t n = white_space_at(text, i);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

std::string trim_white_space(std::string_view text) {
    size_t begin = std::string_view::npos, end = 0;
    for (size_t i = 0; i < text.size();) {
        if (const size_t n = white_space_at(text, i)) {
            i += n;
            continue;
        }
        if (begin == std::string_view::npos) begin = i;
        end = ++i;
    }
    return begin == std::string_view::npos ? std::string() : std::string(text.substr(begin, end - begin));
}

std::string simplify_white_space(std::string_view text) {
    std::string out;
    bool gap = false;
    for (size_t i = 0; i < text.size();) {
        if (const size_t n = white_space_at(text, i)) {
            gap = true;
            i += n;
            continue;
        }
        if (gap && !out.empty()) out += ' ';
        gap = false;
        out += text[i++];
    }
    return out;
}

}  // namespace kvchat
