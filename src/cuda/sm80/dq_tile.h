// CUDA backend, sm80/: the tiled layout of the backward's fp32 dQ accumulator, which the sm80 main
// kernel adds into and the postprocess reads back (BwdParams::dq_accum_layout = kTiled). Index
// arithmetic only, on host and device (tests/test_dq_tile.cpp checks it on the CPU).
#pragma once

#include "common/mask.h"  // FA_HOST_DEVICE

namespace fa::cuda::sm80 {

// The dQ of one q block, rows [0, rows) x columns [0, cols) (cols: the compiled head dim), as 8
// warps compute it: a warps_m x (8 / warps_m) grid of warp tiles [wm = rows / warps_m,
// wn = cols · warps_m / 8], warp w at rows (w % warps_m)·wm, columns (w / warps_m)·wn. In a warp
// tile, lane l = 4g + t holds in each 16 x 8 block (mi, nt) the column pair 2t, 2t + 1 of rows
// g and g + 8 (hi = 0, 1): its pair i = (2·mi + hi)·(wn / 8) + nt is the i-th that the kernel adds.
// The tile keeps pair i of lane l of warp w at floats ((w·pairs + i)·32 + l)·2, so one warp's
// vector add of a pair covers 256 contiguous bytes: two cache lines, where in row order the 32
// lanes spanned 8 rows and 8 lines. A row's 8 columns 8j..8j+7 (one nt, the four t) stay 32
// contiguous bytes for the postprocess.
struct DqTile {
  int rows, cols, warps_m;

  // Float offset of (r, c) in the tile.
  constexpr FA_HOST_DEVICE int offset(int r, int c) const {
    const int wm = rows / warps_m, wn = cols * warps_m / 8;
    const int w = r / wm + warps_m * (c / wn), rr = r % wm, cc = c % wn;
    const int pairs = wm / 16 * 2 * (wn / 8);
    const int i = (rr / 16 * 2 + rr / 8 % 2) * (wn / 8) + cc / 8;
    const int lane = rr % 8 * 4 + cc % 8 / 2;
    return ((w * pairs + i) * 32 + lane) * 2 + cc % 2;
  }
};

// Pair i of a lane lies 64·i floats after its pair 0.
static_assert(DqTile{64, 256, 2}.offset(8, 8) - DqTile{64, 256, 2}.offset(0, 0) == 64 * (8 + 1),
              "pair (mi 0, hi 1, nt 1) is pair 9 of a 32 x 64 warp tile");
static_assert(DqTile{128, 64, 4}.offset(127, 63) == 128 * 64 - 1, "the tile's last float");

}  // namespace fa::cuda::sm80
