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

// FlashAttention: Q blocks outer, K/V blocks inner, online softmax; extra memory O(tile). Runs
// the build of the vector kernels cpu/dispatch.cpp picked for this CPU (cpu/kernels.h).
void flash_fwd(const Problem& p);
void flash_bwd(const Problem& p);

// The build in use and the vector features it was compiled with, e.g. "native: avx512f fma" or,
// in a portable build, "avx2: avx2 avx fma".
const char* features();

}  // namespace fa::cpu
