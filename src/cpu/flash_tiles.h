// CPU backend: tile sizes of the flash forward and backward, and the helpers they share.
// Each size is chosen by measurement (docs/PERF.md, "## CPU"); the comment gives the run.
#pragma once

#include <cstdint>

#include "cpu/isa.h"
#include "cpu/simd.h"
#include "cpu/tile_gemm.h"

FA_CPU_BEGIN

// Forward: queries per block (the 16-lane columns of Sᵀ and the rows of O) and keys per block.
// Bq = 192 is a multiple of both the 6-row register tile (P·V) and the 64-column panel (Sᵀ),
// and reloads K/V from L3 a third as often as 64. fp32 S=4096 D=128, 2 threads: Bq 64 / 96 /
// 128 / 192 gave 349 / 383 / 370 / 408 GFLOP/s; Bk 48 / 96 / 192 at Bq 192 within 2 %.
constexpr int64_t kFwdBq = 192;
constexpr int64_t kFwdBk = 96;

// Backward: keys per block (the dK/dV rows a task holds) and queries per block.
// bf16 S=2048 D=128, 2 threads (Bk × Bq): 64×64 515, 96×48 469, 96×96 539, 128×64 534,
// 192×96 544 GFLOP/s; fp32 best at 96×96 (439). 96×96 keeps a task's tiles in L2 at D = 256.
constexpr int64_t kBwdBk = 96;
constexpr int64_t kBwdBq = 96;

static_assert(kFwdBq % simd::kLanes == 0, "the forward's query block is made of 16-lane vectors");
static_assert(kFwdBq % kMr == 0, "the forward's query block is whole register tiles of P·V");

// x clamped to [-1, n + 1]: a key offset relative to a block of n keys, exact in fp32.
inline int64_t clamp_rel(int64_t x, int64_t n) { return x < -1 ? -1 : (x > n + 1 ? n + 1 : x); }

FA_CPU_END
