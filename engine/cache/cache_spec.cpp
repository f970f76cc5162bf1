#include "engine/cache/cache_spec.h"

#include "engine/cache/cache_presets.h"
#include "engine/error.h"

#include <map>
#include <set>

namespace kvchat {

namespace {

// The parameters each strategy name takes (its preset's); every other key is refused. Sorted by
// name, as messages list them.
const std::map<std::string, std::set<std::string>>& params_by_name() {
    static const std::map<std::string, std::set<std::string>> params = [] {
        std::map<std::string, std::set<std::string>> m;
        for (const CachePreset& p : cache_presets()) m[std::string(p.name)] = {p.params.begin(), p.params.end()};
        return m;
    }();
    return params;
}

// A spec, or a piece of one, as an error message echoes it: quoted, and cut to its first 200 bytes
// (whole UTF-8 characters) so a pasted 100 KB spec does not flood the terminal.
std::string shown(const std::string& text) {
    constexpr size_t kMax = 200;
    if (text.size() <= kMax) return "'" + text + "'";
    size_t cut = kMax;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    return "'" + text.substr(0, cut) + "...' (" + std::to_string(text.size()) + " bytes)";
}

// The first `c` at or after `from` that is not inside a "quoted" value (where \" and \\ are
// escapes); npos when none.
size_t find_unquoted(const std::string& s, char c, size_t from) {
    bool quoted = false;
    for (size_t i = from; i < s.size(); ++i) {
        if (quoted) {
            if (s[i] == '\\') ++i;
            else if (s[i] == '"') quoted = false;
        } else if (s[i] == '"') {
            quoted = true;
        } else if (s[i] == c) {
            return i;
        }
    }
    return std::string::npos;
}

// A parameter's value: as written, or the text inside "quotes" with \" and \\ unescaped (a
// folder whose name holds ',' or '+').
std::string unquoted_value(const std::string& part, const std::string& key, const std::string& v) {
    if (v.empty() || v[0] != '"') return v;
    std::string out;
    for (size_t i = 1; i < v.size(); ++i) {
        if (v[i] == '\\' && i + 1 < v.size()) {
            out += v[++i];
        } else if (v[i] == '"') {
            if (i + 1 != v.size())
                throw Error("cache spec " + shown(part) + ": " + key + " has text after its closing quote");
            return out;
        } else {
            out += v[i];
        }
    }
    throw Error("cache spec " + shown(part) + ": the quoted value of " + key + " has no closing quote");
}

std::string known_names() {
    std::string s;
    for (const auto& [name, params] : params_by_name()) s += (s.empty() ? "" : ", ") + name;
    return s;
}

int64_t integer(const std::string& part, const std::string& key, const std::string& value, int64_t lo, int64_t hi) {
    size_t used = 0;
    long long v = 0;
    try {
        v = std::stoll(value, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (value.empty() || used != value.size())
        throw Error("cache spec " + shown(part) + ": " + key + " expects a whole number, got " + shown(value));
    if (v < lo || v > hi)
        throw Error("cache spec " + shown(part) + ": " + key + "=" + value.substr(0, 40) + " is out of range [" + std::to_string(lo) +
                    ", " + std::to_string(hi) + "]");
    return v;
}

struct Part {
    std::string text, name;
    std::map<std::string, std::string> params;
    bool has(const std::string& k) const { return params.count(k) > 0; }
    const std::string& need(const std::string& k) const {
        auto it = params.find(k);
        if (it == params.end()) throw Error("cache spec " + shown(text) + ": missing parameter " + k + " (" + name + ":" + k + "=N)");
        return it->second;
    }
};

Part parse_part(const std::string& text) {
    Part p;
    p.text = text;
    const size_t colon = text.find(':');
    p.name = text.substr(0, colon);
    if (p.name.empty()) throw Error("cache spec " + shown(text) + ": empty strategy name (known: " + known_names() + ")");
    auto known = params_by_name().find(p.name);
    if (known == params_by_name().end())
        throw Error("unknown cache strategy " + shown(p.name) + " (known: " + known_names() + ")");
    if (colon == std::string::npos) return p;
    const std::string rest = text.substr(colon + 1);
    if (rest.empty()) throw Error("cache spec " + shown(text) + ": nothing after ':'");
    size_t at = 0;
    while (at <= rest.size()) {
        const size_t comma = find_unquoted(rest, ',', at);
        const std::string kv = rest.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        const size_t eq = kv.find('=');
        if (eq == std::string::npos || eq == 0)
            throw Error("cache spec " + shown(text) + ": parameter " + shown(kv) + " is not of the form key=value");
        const std::string key = kv.substr(0, eq);
        if (!known->second.count(key)) {
            std::string allowed;
            for (const auto& k : known->second) allowed += (allowed.empty() ? "" : ", ") + k;
            throw Error("cache spec " + shown(text) + ": unknown parameter " + shown(key) + " for " + p.name +
                        (allowed.empty() ? " (it takes none)" : " (it takes " + allowed + ")"));
        }
        if (p.params.count(key)) throw Error("cache spec " + shown(text) + ": parameter " + key + " given twice");
        p.params[key] = unquoted_value(text, key, kv.substr(eq + 1));
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    return p;
}

constexpr int64_t kMaxTokens = (int64_t{1} << 31) - 1;

}  // namespace

std::string_view cache_base_name(CacheBase base) {
    switch (base) {
        case CacheBase::Dynamic: return "dynamic";
        case CacheBase::Static: return "static";
        case CacheBase::SlidingWindow: return "sliding_window";
        case CacheBase::Sink: return "sink";
        case CacheBase::Hybrid: return "hybrid";
    }
    return "dynamic";
}

CacheSpec CacheSpec::sliding_window(int window) {
    CacheSpec s;
    s.base = CacheBase::SlidingWindow;
    s.retention = RetentionKind::SlidingWindow;
    s.window = window;
    return s;
}

CacheSpec CacheSpec::sink(int window, int sinks) {
    CacheSpec s;
    s.base = CacheBase::Sink;
    s.retention = RetentionKind::Sink;
    s.window = window;
    s.sinks = sinks;
    return s;
}

CacheSpec parse_cache_spec(const std::string& text) {
    if (text.empty()) throw Error("empty cache spec (known strategies: " + known_names() + ")");
    CacheSpec s;
    std::string base_part, quant_part, offload_part;
    size_t at = 0;
    int part_no = 0;
    while (true) {
        const size_t plus = find_unquoted(text, '+', at);
        const std::string piece = text.substr(at, plus == std::string::npos ? std::string::npos : plus - at);
        ++part_no;
        if (piece.empty())
            throw Error("cache spec " + shown(text) + ": part " + std::to_string(part_no) +
                        " is empty (nothing " + (at == 0 ? "before the first '+'" : plus == std::string::npos ? "after the last '+'" : "between two '+'") +
                        ")");
        const Part p = parse_part(piece);
        if (p.has("dtype")) {
            if (s.dtype) throw Error("cache spec '" + text + "': dtype is given twice");
            s.dtype = parse_kv_dtype(p.params.at("dtype"));
            if (!s.dtype)
                throw Error("cache spec '" + piece + "': dtype=" + p.params.at("dtype") + " is not supported (f16, bf16 or f32)");
        }
        auto take_base = [&](CacheBase base) {
            if (!base_part.empty())
                throw Error("cache spec " + shown(text) + ": " + shown(base_part) + " and " + shown(piece) +
                            " both choose what the cache keeps; combine one of them with quantized or offloaded");
            base_part = piece;
            s.base = base;
        };
        if (p.name == "quantized") {
            if (!quant_part.empty()) throw Error("cache spec " + shown(text) + ": quantized is given twice");
            quant_part = piece;
            s.nbits = static_cast<int>(p.has("nbits") ? integer(piece, "nbits", p.params.at("nbits"), 0, 64) : 4);
            if (s.nbits != 2 && s.nbits != 4 && s.nbits != 8)
                throw Error("cache spec " + shown(piece) + ": nbits=" + std::to_string(s.nbits) + " is not supported (2, 4 or 8)");
            s.group = static_cast<int>(p.has("group") ? integer(piece, "group", p.params.at("group"), 8, 4096) : 64);
            if (s.group % 8 != 0)
                throw Error("cache spec " + shown(piece) + ": group=" + std::to_string(s.group) + " must be a multiple of 8");
            s.residual = static_cast<int>(p.has("residual") ? integer(piece, "residual", p.params.at("residual"), 0, 1 << 20) : 128);
            if (s.residual < s.group)
                throw Error("cache spec " + shown(piece) + ": residual=" + std::to_string(s.residual) +
                            " must be at least group=" + std::to_string(s.group) +
                            " (keys are quantized a group of tokens at a time)");
        } else if (p.name == "offloaded" || p.name == "offloaded_static") {
            if (!offload_part.empty()) throw Error("cache spec " + shown(text) + ": offloading is given twice");
            offload_part = piece;
            s.offloaded = true;
            if (p.has("dir")) {
                s.offload_dir = p.params.at("dir");
                if (s.offload_dir.empty()) throw Error("cache spec " + shown(piece) + ": dir is empty");
            }
            if (p.name == "offloaded_static") {
                take_base(CacheBase::Static);
                s.fixed = true;
                s.max_len = integer(piece, "max_len", p.need("max_len"), 1, kMaxTokens);
            }
        } else if (p.name == "dynamic") {
            take_base(CacheBase::Dynamic);
        } else if (p.name == "static") {
            take_base(CacheBase::Static);
            s.fixed = true;
            s.max_len = integer(piece, "max_len", p.need("max_len"), 1, kMaxTokens);
        } else if (p.name == "hybrid") {
            take_base(CacheBase::Hybrid);
            s.hybrid = true;
            if (p.has("max_len")) {
                s.fixed = true;
                s.max_len = integer(piece, "max_len", p.params.at("max_len"), 1, kMaxTokens);
            }
        } else if (p.name == "sliding_window") {
            take_base(CacheBase::SlidingWindow);
            s.retention = RetentionKind::SlidingWindow;
            s.window = static_cast<int>(integer(piece, "window", p.need("window"), 1, 1 << 24));
        } else if (p.name == "sink") {
            take_base(CacheBase::Sink);
            s.retention = RetentionKind::Sink;
            s.window = static_cast<int>(integer(piece, "window", p.need("window"), 2, 1 << 24));
            s.sinks = static_cast<int>(integer(piece, "sinks", p.need("sinks"), 1, 1 << 24));
            if (s.sinks >= s.window)
                throw Error("cache spec " + shown(piece) + ": sinks=" + std::to_string(s.sinks) +
                            " must be smaller than window=" + std::to_string(s.window));
        }
        if (plus == std::string::npos) break;
        at = plus + 1;
    }
    return s;
}

std::string to_string(const CacheSpec& s) {
    std::vector<std::string> parts;
    std::string dir;
    if (!s.offload_dir.empty()) {
        // Quoted when the folder's name holds what separates parameters or parts.
        if (s.offload_dir.find_first_of(",+\"\\") == std::string::npos && s.offload_dir[0] != '"') {
            dir = "dir=" + s.offload_dir;
        } else {
            dir = "dir=\"";
            for (char c : s.offload_dir) {
                if (c == '"' || c == '\\') dir += '\\';
                dir += c;
            }
            dir += '"';
        }
    }
    bool offload_done = false;
    if (s.base == CacheBase::Static) {
        if (s.offloaded) {
            parts.push_back("offloaded_static:max_len=" + std::to_string(s.max_len) + (dir.empty() ? "" : "," + dir));
            offload_done = true;
        } else {
            parts.push_back("static:max_len=" + std::to_string(s.max_len));
        }
    } else if (s.base == CacheBase::Hybrid) {
        parts.push_back(s.fixed ? "hybrid:max_len=" + std::to_string(s.max_len) : "hybrid");
    } else if (s.base == CacheBase::SlidingWindow) {
        parts.push_back("sliding_window:window=" + std::to_string(s.window));
    } else if (s.base == CacheBase::Sink) {
        parts.push_back("sink:window=" + std::to_string(s.window) + ",sinks=" + std::to_string(s.sinks));
    } else if (s.nbits == 0 && !s.offloaded) {
        parts.push_back("dynamic");
    }
    if (s.nbits != 0)
        parts.push_back("quantized:nbits=" + std::to_string(s.nbits) + ",residual=" + std::to_string(s.residual) +
                        ",group=" + std::to_string(s.group));
    if (s.offloaded && !offload_done) parts.push_back(dir.empty() ? "offloaded" : "offloaded:" + dir);
    if (s.dtype) {
        // On the first part, after its other parameters.
        std::string& first = parts.empty() ? parts.emplace_back("dynamic") : parts.front();
        first += std::string(first.find(':') == std::string::npos ? ":" : ",") + "dtype=" + kv_dtype_name(*s.dtype);
    }
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : "+") + p;
    return out;
}

std::vector<std::string> split_spec_list(const std::string& text) {
    std::vector<std::string> out;
    size_t at = 0;
    while (at <= text.size()) {
        const size_t comma = find_unquoted(text, ',', at);
        const std::string piece = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        // "residual=64" continues the previous strategy; "static:max_len=8" or "dynamic" starts one.
        const size_t eq = piece.find('='), colon = piece.find(':'), plus = piece.find('+');
        const bool is_param = eq != std::string::npos && (colon == std::string::npos || colon > eq) &&
                              (plus == std::string::npos || plus > eq);
        if (is_param && !out.empty())
            out.back() += "," + piece;
        else
            out.push_back(piece);
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    return out;
}

}  // namespace kvchat
