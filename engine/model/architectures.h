#pragma once
// The forward pass of each supported architecture: one chunk of tokens through every layer,
// leaving the final normalised hidden states (n x n_embd) in `hidden`.
#include "engine/model/model.h"

namespace kvchat {

void forward_gemma3(const Model& m, Backend& be, Cache& cache, const int32_t* tokens, const int32_t* pos,
                    int64_t n, Buffer& hidden);
void forward_llama(const Model& m, Backend& be, Cache& cache, const int32_t* tokens, const int32_t* pos,
                   int64_t n, Buffer& hidden);

}  // namespace kvchat
