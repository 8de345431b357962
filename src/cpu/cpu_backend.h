// CPU backend: the entry points the API core calls.
// Reference (naive, fp64 accumulation) and FlashAttention (tiled, threaded) paths.
// Receives a validated Problem; throws fa::Error on failure; no CUDA.
#pragma once

#include <string>

#include "api/problem.h"

namespace fa::cpu {

// Naive attention: materialises S and P per (batch, head) and accumulates in fp64.
void reference_fwd(const Problem& p);
void reference_bwd(const Problem& p);

// FlashAttention: Q blocks outer, K/V blocks inner, online softmax; extra memory O(tile).
void flash_fwd(const Problem& p);
void flash_bwd(const Problem& p);

// Vector features this translation unit set was compiled with, e.g. "avx512f fma".
const char* features();

}  // namespace fa::cpu
