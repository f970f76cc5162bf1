#pragma once
// Which SIMD level each kernel family runs at on this CPU. Every level computes the same bits
// (matmul_kernels.h), but which is fastest depends on the CPU: AMD Zen executes many 512-bit
// operations differently from Intel, and a family's AVX2 kernel can beat its AVX-512 one there.
// matmul.cpp measures each family once on its first use; the choices are kept in a small text
// file per CPU model and kvchat version, so later processes start with them.
//
// The file ($XDG_CACHE_HOME/kvchat/simd-levels, else ~/.cache/kvchat/simd-levels):
//   kvchat-simd-levels 2
//   cpu <the key cpu_model_key() gives>
//   <family> <level>            one line per measured family, e.g. "q8_0/decode avx2"
// A file for another CPU or version, or one that does not parse, is ignored and rewritten.
#include <map>
#include <string>

namespace kvchat {

// The CPU's brand string, family, model, stepping, the best SIMD level it offers, and kvchat's
// version: what a measured choice is valid for.
std::string cpu_model_key(const char* best_level);

// family -> level, as a choice file holds them.
using SimdChoices = std::map<std::string, std::string>;

// The choices in `text` when it is a well-formed choice file for `cpu_key`; otherwise none.
// Only levels in `known_levels` (space-separated) are taken; a family name is [a-z0-9_/]+.
SimdChoices parse_simd_choices(const std::string& text, const std::string& cpu_key, const std::string& known_levels);
std::string format_simd_choices(const SimdChoices& choices, const std::string& cpu_key);

// Where the file lives; empty when neither XDG_CACHE_HOME nor HOME is set.
std::string simd_choices_path();
// The file's choices for cpu_key (none when it is missing, unreadable or for another CPU).
SimdChoices load_simd_choices(const std::string& path, const std::string& cpu_key, const std::string& known_levels);
// Adds `choices` to the file's (re-read first, so that two processes measuring different
// families keep both) and writes it atomically. Returns false when it could not be written (a
// read-only home): the choices then last as long as the process.
bool save_simd_choices(const std::string& path, const SimdChoices& choices, const std::string& cpu_key,
                       const std::string& known_levels);

}  // namespace kvchat
