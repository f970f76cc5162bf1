#pragma once
// UTF-8 checking and repair. Text reaches the store from pastes, files and a model's output; it is
// kept byte for byte when it is valid and otherwise repaired the way the Unicode standard
// recommends (chapter 3, "U+FFFD substitution of maximal subparts"), so that every reader of the
// store sees well-formed text and the user is told that something was replaced.
#include <string>
#include <string_view>

namespace kvchat {

// True when `text` is well-formed UTF-8 (Unicode table 3-7): no overlong forms, no surrogates
// (U+D800..U+DFFF), nothing above U+10FFFF, no stray continuation bytes, no truncated sequences.
bool is_valid_utf8(std::string_view text);

struct RepairedUtf8 {
    std::string text;
    bool replaced = false;  // true when at least one U+FFFD was substituted
};

// A copy of `text` in which each maximal subpart of an ill-formed sequence is replaced by one
// U+FFFD (EF BF BD). Valid input comes back unchanged with replaced == false.
RepairedUtf8 repair_utf8(std::string_view text);

// True when `text` holds nothing but Unicode White_Space (tab, newline, space, U+0085, U+00A0,
// U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000): a message of it says nothing,
// whichever of them it is made of. Invalid UTF-8 is not white space.
bool is_blank_text(std::string_view text);
// Bytes of the white-space character (as is_blank_text counts them) starting at text[i]; 0 when
// there is none.
size_t white_space_at(std::string_view text, size_t i);
// The text without white space at either end.
std::string trim_white_space(std::string_view text);
// The text without white space at either end, each run of it inside made one space.
std::string simplify_white_space(std::string_view text);

// The streaming form, for text that arrives in pieces (a model's tokens): appends `bytes` to `out`
// repaired as repair_utf8 does, except that an incomplete but so far valid sequence at the end is
// left unconsumed unless `at_end`, so the caller can wait for its remaining bytes. Returns how many
// bytes of `bytes` were consumed.
size_t append_valid_utf8(std::string_view bytes, bool at_end, std::string& out);

}  // namespace kvchat
