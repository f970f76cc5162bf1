#pragma once
// GELU (tanh form) evaluated on the fp16 grid, input and output, as llama.cpp's CPU backend does:
// Gemma's greedy continuations are sensitive enough that the exact float function makes them
// drift from the reference implementation users compare against. Both backends read this one
// table: the CPU gathers from it, the CUDA backend uploads it once.
#include <cstddef>
#include <span>

namespace kvchat {

// Entry h is gelu(x) for the fp16 value x with bits h, rounded to fp16 and kept as a float. The
// gated activation uses it for -10 < x < 10 (0 from -10 down, x from 10 up, as ggml_vec_geglu_f32).
inline constexpr size_t kGeluTableSize = size_t{1} << 16;
std::span<const float, kGeluTableSize> gelu_fp16_table();

}  // namespace kvchat
