// CPU backend: tile sizes of the flash forward and backward, and the helpers they share.
// Each size is chosen by measurement (docs/PERF.md, "## CPU"); the comment gives the run.
#pragma once

#include <cstdint>

#include "cpu/simd.h"

namespace fa::cpu {

// Forward: queries per block (the lanes of Sᵀ, a multiple of 16) and keys per block.
constexpr int64_t kFwdBq = 192;
constexpr int64_t kFwdBk = 96;

// Backward: keys per block (rows of dK/dV kept per thread) and queries per block.
constexpr int64_t kBwdBk = 96;
constexpr int64_t kBwdBq = 96;

static_assert(kFwdBq % simd::kLanes == 0 && kBwdBq % simd::kLanes == 0, "query blocks are lanes");

// x clamped to [-1, n + 1]: a key offset relative to a block of n keys, exact in fp32.
inline int64_t clamp_rel(int64_t x, int64_t n) { return x < -1 ? -1 : (x > n + 1 ? n + 1 : x); }

}  // namespace fa::cpu
