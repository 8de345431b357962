// Tests, CPU: the tiled layout of the sm80 backward's dQ accumulator (src/cuda/sm80/dq_tile.h),
// for every tile shape the kernels use. The layout must be a permutation of the tile; the main
// kernel's adds assume that a lane's pair i lies 64·i floats after its pair 0 and that the 32
// lanes of one add cover 32 consecutive pairs; the postprocess reads a row's 8 columns 8j..8j+7
// as 32 contiguous, 32-byte-aligned bytes.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/sm80/dq_tile.h"

namespace {

using fa::cuda::sm80::DqTile;

// (kBlockM, compiled head dim, kDqWarpsM) of src/cuda/sm80/bwd_config.h: full-size 64, 128, 256,
// then the compact hdim 64 (the compact 128 and 256 tiles equal the full-size ones).
const DqTile kTiles[] = {{128, 64, 4}, {64, 128, 2}, {64, 256, 2}, {64, 64, 4}};

// Row and column of pair i of lane `lane` in warp w, as the kernel's mma.sync accumulator holds
// them: pair i = (2·mi + hi)·(wn / 8) + nt is acc[mi][nt][2·hi .. 2·hi + 1].
void pair_at(const DqTile& t, int w, int lane, int i, int* r, int* c) {
  const int wm = t.rows / t.warps_m, wn = t.cols * t.warps_m / 8, nts = wn / 8;
  const int mi = i / (2 * nts), hi = i / nts % 2, nt = i % nts;
  *r = (w % t.warps_m) * wm + mi * 16 + hi * 8 + lane / 4;
  *c = (w / t.warps_m) * wn + nt * 8 + 2 * (lane % 4);
}

TEST(DqTile, IsAPermutationOfTheTile) {
  for (const DqTile& t : kTiles) {
    std::vector<int> hits(size_t(t.rows * t.cols), 0);
    for (int r = 0; r < t.rows; ++r)
      for (int c = 0; c < t.cols; ++c) {
        const int o = t.offset(r, c);
        ASSERT_GE(o, 0);
        ASSERT_LT(o, t.rows * t.cols);
        ++hits[size_t(o)];
      }
    for (int h : hits) ASSERT_EQ(h, 1) << "tile " << t.rows << " x " << t.cols << ", warps_m " << t.warps_m;
  }
}

TEST(DqTile, AWarpsAddCoversConsecutivePairs) {
  for (const DqTile& t : kTiles) {
    const int wm = t.rows / t.warps_m, wn = t.cols * t.warps_m / 8;
    const int pairs = wm / 16 * 2 * (wn / 8);
    for (int w = 0; w < 8; ++w)
      for (int i = 0; i < pairs; ++i) {
        int r0, c0;
        pair_at(t, w, 0, i, &r0, &c0);
        const int first = t.offset(r0, c0);
        for (int lane = 0; lane < 32; ++lane) {
          int r, c, rb, cb;
          pair_at(t, w, lane, i, &r, &c);
          pair_at(t, w, lane, 0, &rb, &cb);
          ASSERT_EQ(t.offset(r, c), t.offset(rb, cb) + 64 * i) << "lane's pair i at 64·i";
          ASSERT_EQ(t.offset(r, c), first + 2 * lane) << "lanes side by side";
          ASSERT_EQ(t.offset(r, c + 1), t.offset(r, c) + 1) << "a pair's two columns adjacent";
        }
      }
  }
}

TEST(DqTile, ARowsEightColumnsAreContiguous) {
  for (const DqTile& t : kTiles)
    for (int r = 0; r < t.rows; ++r)
      for (int c = 0; c < t.cols; c += 8) {
        const int o = t.offset(r, c);
        ASSERT_EQ(o % 8, 0);
        for (int e = 1; e < 8; ++e) ASSERT_EQ(t.offset(r, c + e), o + e);
      }
}

}  // namespace
