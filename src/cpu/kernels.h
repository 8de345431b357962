// CPU backend: the entry points of one build of the vector kernels (namespace FA_CPU_ISA, see
// isa.h). cpu/dispatch.cpp picks a build and forwards cpu_backend.h's flash_fwd, flash_bwd and
// features to it. Receive a validated Problem; throw fa::Error on failure.
#pragma once

#include "api/problem.h"
#include "cpu/isa.h"

FA_CPU_BEGIN

// FlashAttention: Q blocks outer, K/V blocks inner, online softmax; extra memory O(tile).
void flash_fwd_kernel(const Problem& p);
void flash_bwd_kernel(const Problem& p);

// Vector features this build was compiled with, e.g. "avx512f avx512bw fma".
const char* kernel_features();

FA_CPU_END
