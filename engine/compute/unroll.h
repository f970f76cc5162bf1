#pragma once
// f(0), f(1), ..., f(N - 1), each index a compile-time constant. Kernels index their arrays of
// registers with it: GCC keeps such an array in registers only when every index is known before
// its loops are unrolled, and otherwise stores the whole array to memory at every step.

#include <type_traits>
#include <utility>

namespace kvchat {

template <int N, class F>
inline void unroll(F&& f) {
    [&]<int... I>(std::integer_sequence<int, I...>) { (f(std::integral_constant<int, I>{}), ...); }(std::make_integer_sequence<int, N>{});
}

}  // namespace kvchat
