#include "engine/compute/simd_choices.h"

#include "engine/common/atomic_file.h"
#include "engine/error.h"

#include <cpuid.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <sstream>

namespace kvchat {

namespace {

// 2: Q4_1 decode has an AVX-512 kernel of its own; files of 1 measured the same kernel at both
// levels, so their choices for it mean nothing and all are measured again.
constexpr const char* kMagic = "kvchat-simd-levels 2";
// The file is a few hundred bytes; anything far larger is not ours.
constexpr size_t kMaxFileBytes = 64 * 1024;

bool family_name_ok(const std::string& s) {
    if (s.empty() || s.size() > 64) return false;
    for (char c : s)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '/')) return false;
    return true;
}

bool level_known(const std::string& level, const std::string& known_levels) {
    std::istringstream in(known_levels);
    for (std::string k; in >> k;)
        if (k == level) return true;
    return false;
}

}  // namespace

std::string cpu_model_key(const char* best_level) {
    char brand[49] = {};
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000004u) {
        for (unsigned i = 0; i < 3; ++i) {
            __get_cpuid(0x80000002u + i, &a, &b, &c, &d);
            std::memcpy(brand + 16 * i, &a, 4);
            std::memcpy(brand + 16 * i + 4, &b, 4);
            std::memcpy(brand + 16 * i + 8, &c, 4);
            std::memcpy(brand + 16 * i + 12, &d, 4);
        }
    }
    std::string name(brand);
    // Trim the padding spaces some CPUs put around their brand string; keep it on one line.
    while (!name.empty() && name.back() == ' ') name.pop_back();
    while (!name.empty() && name.front() == ' ') name.erase(name.begin());
    for (char& ch : name)
        if (ch == '\n' || ch == '\r' || ch == '\0') ch = ' ';
    unsigned family = 0, model = 0, stepping = 0;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        const unsigned base_family = (a >> 8) & 0xf, ext_family = (a >> 20) & 0xff;
        family = base_family == 0xf ? base_family + ext_family : base_family;
        model = ((a >> 4) & 0xf) | (base_family >= 0x6 ? ((a >> 16) & 0xf) << 4 : 0);
        stepping = a & 0xf;
    }
    return (name.empty() ? std::string("unknown") : name) + " | family " + std::to_string(family) + " model " +
           std::to_string(model) + " stepping " + std::to_string(stepping) + " | " + best_level + " | kvchat " +
           KVCHAT_VERSION;
}

SimdChoices parse_simd_choices(const std::string& text, const std::string& cpu_key, const std::string& known_levels) {
    std::istringstream in(text);
    std::string line;
    if (!std::getline(in, line) || line != kMagic) return {};
    if (!std::getline(in, line) || line != "cpu " + cpu_key) return {};
    SimdChoices out;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        const size_t sp = line.find(' ');
        if (sp == std::string::npos) return {};
        const std::string family = line.substr(0, sp), level = line.substr(sp + 1);
        if (!family_name_ok(family) || !level_known(level, known_levels)) return {};
        out[family] = level;
    }
    return out;
}

std::string format_simd_choices(const SimdChoices& choices, const std::string& cpu_key) {
    std::string s = std::string(kMagic) + "\ncpu " + cpu_key + "\n";
    for (const auto& [family, level] : choices) s += family + " " + level + "\n";
    return s;
}

std::string simd_choices_path() {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    if (xdg && *xdg) return std::string(xdg) + "/kvchat/simd-levels";
    const char* home = std::getenv("HOME");
    if (home && *home) return std::string(home) + "/.cache/kvchat/simd-levels";
    return {};
}

SimdChoices load_simd_choices(const std::string& path, const std::string& cpu_key, const std::string& known_levels) {
    if (path.empty()) return {};
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return {};
    try {
        return parse_simd_choices(read_whole_file(path, kMaxFileBytes), cpu_key, known_levels);
    } catch (const Error&) {
        return {};  // unreadable or too large: measured again and rewritten
    }
}

bool save_simd_choices(const std::string& path, const SimdChoices& choices, const std::string& cpu_key,
                       const std::string& known_levels) {
    if (path.empty()) return false;
    SimdChoices merged = load_simd_choices(path, cpu_key, known_levels);
    for (const auto& [family, level] : choices) merged[family] = level;
    // mkdir -p of the file's directory (its parent, ~/.cache, usually exists).
    const std::string dir = path.substr(0, path.rfind('/'));
    for (size_t i = 1; i <= dir.size(); ++i)
        if (i == dir.size() || dir[i] == '/') ::mkdir(dir.substr(0, i).c_str(), 0700);
    try {
        write_file_atomically(path, format_simd_choices(merged, cpu_key));
        return true;
    } catch (const Error&) {
        return false;
    }
}

}  // namespace kvchat
