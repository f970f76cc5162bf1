#pragma once
// A name or text as messages show it: between single quotes. (Not `quoted`: std::quoted would
// win overload resolution for std::string arguments through argument-dependent lookup.)
#include <string>
#include <string_view>

namespace kvchat {

inline std::string in_quotes(std::string_view s) {
    std::string q;  // (appended piece by piece: GCC 12 warns wrongly about "'" + string + "'")
    q.reserve(s.size() + 2);
    q += '\'';
    q.append(s);
    q += '\'';
    return q;
}

}  // namespace kvchat
