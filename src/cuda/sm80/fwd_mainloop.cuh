// CUDA backend, sm80/: the forward mainloop pieces: cp.async tile loads into swizzled shared
// memory, S = Q·Kᵀ and O += P·V with ldmatrix + mma.sync. Warp/thread scope helpers only:
// no barriers, no softmax, no global stores here.
#pragma once

#include <cstdint>

#include "cuda/common/convert.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/mma.cuh"

namespace fa::cuda::sm80 {

// Shared-memory tiles are [rows][kHeadDim] 16-bit, rows of kHeadDim/8 16-byte chunks; chunk c of
// row r is stored at chunk c ^ (r % 8) so that the 8 rows an ldmatrix reads hit 8 distinct
// 16-byte bank groups (needs kHeadDim >= 64).
template <int kHeadDim>
struct Swizzle {
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kChunks = kHeadDim / 8;
  static_assert(kChunks >= 8, "the XOR swizzle needs at least 8 chunks per row");
  __device__ __forceinline__ static uint32_t offset(int row, int chunk) {
    return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
  }
};

// cta:: scope: all kThreads threads call cta_load() with the same arguments. Thread t copies
// chunk t % kChunks of rows t / kChunks + i·kRowStep; rows >= rows_valid and columns >=
// cols_valid (a multiple of 8) are zero-filled and never read.
template <class T, int kHeadDim, int kRows, int kThreads>
struct TileLoader {
  static constexpr int kChunks = kHeadDim / 8;
  static constexpr int kRowStep = kThreads / kChunks;
  static constexpr int kIters = kRows / kRowStep;
  static_assert(kThreads % kChunks == 0 && kRows % kRowStep == 0, "loader mapping");

  int row0;
  int chunk;

  __device__ __forceinline__ explicit TileLoader(int tid) : row0(tid / kChunks), chunk(tid % kChunks) {}

  __device__ __forceinline__ void cta_load(uint32_t smem_tile, const T* rows, int64_t row_stride,
                                           int rows_valid, int cols_valid) const {
    const bool col_ok = chunk * 8 < cols_valid;
    const T* src = rows + row0 * row_stride + chunk * 8;
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int row = row0 + i * kRowStep;  // row % 8 is fixed per thread when kRowStep % 8 == 0
      const bool ok = col_ok && row < rows_valid;
      const T* s = src + static_cast<int64_t>(i * kRowStep) * row_stride;
      // rows (row 0 of the tile, always in range) is a valid address for the zero-fill case.
      ptx::cp_async_16(smem_tile + Swizzle<kHeadDim>::offset(row, chunk), ok ? s : rows, ok);
    }
  }
};

// Per-lane ldmatrix addressing. Every tile row base is a multiple of 8, so a lane's row % 8 is
// lane % 8 and its swizzle reduces to XOR of the chunk index with a per-lane constant.
template <int kHeadDim>
struct LaneAddr {
  static constexpr int kRowBytes = kHeadDim * 2;
  uint32_t base;  // smem address of this lane's row, chunk 0 unswizzled
  int key;        // XOR key (< 8) applied to an even chunk index 2·step

  // Byte address of the lane's 16-byte row piece for k-step `step` (16 columns each).
  __device__ __forceinline__ uint32_t at(int row_offset_bytes, int step) const {
    return base + row_offset_bytes + (((2 * step) ^ key) << 4);
  }
};

// A operand (Q rows, row-major [m][k]): matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15),
// (8-15, 8-15) -> a0..a3. Lane l gives row l%8 + 8·((l/8)%2), chunk +l/16.
template <int kHeadDim>
__device__ __forceinline__ LaneAddr<kHeadDim> lane_addr_a(uint32_t tile, int first_row, int lane) {
  return {tile + (first_row + (lane & 7) + 8 * ((lane >> 3) & 1)) * LaneAddr<kHeadDim>::kRowBytes,
          (lane >> 4) ^ (lane & 7)};
}
// B operand from K rows ([n][k], "col" B): matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15,
// k 0-7), (n 8-15, k 8-15) -> b0 b1 of n-tile 0, b0 b1 of n-tile 1. Lane l: row l%8 + 8·(l/16),
// chunk +(l/8)%2.
template <int kHeadDim>
__device__ __forceinline__ LaneAddr<kHeadDim> lane_addr_bt(uint32_t tile, int lane) {
  return {tile + ((lane & 7) + 8 * (lane >> 4)) * LaneAddr<kHeadDim>::kRowBytes,
          ((lane >> 3) & 1) ^ (lane & 7)};
}
// B operand from V rows ([k][n], transposed by ldmatrix.trans): matrices (k 0-7, n 0-7),
// (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15). Lane l: row l%8 + 8·((l/8)%2), chunk +l/16.
template <int kHeadDim>
__device__ __forceinline__ LaneAddr<kHeadDim> lane_addr_b(uint32_t tile, int lane) {
  return {tile + ((lane & 7) + 8 * ((lane >> 3) & 1)) * LaneAddr<kHeadDim>::kRowBytes,
          (lane >> 4) ^ (lane & 7)};
}

// warp:: S[mt][nt] = Q (this warp's kMT m16 tiles) · K_jᵀ (kNT n8 tiles), over kHeadDim.
template <bool kIsBf16, int kHeadDim, int kMT, int kNT>
__device__ __forceinline__ void warp_gemm_qk(float (&s)[kMT][kNT][4], const LaneAddr<kHeadDim>& q,
                                             const LaneAddr<kHeadDim>& k) {
  constexpr int kRowBytes = kHeadDim * 2;
  zero_acc(s);
#pragma unroll
  for (int ks = 0; ks < kHeadDim / 16; ++ks) {
    uint32_t a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) ptx::warp_ldmatrix_x4(a[mt], q.at(mt * 16 * kRowBytes, ks));
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      uint32_t b[4];
      ptx::warp_ldmatrix_x4(b, k.at(np * 16 * kRowBytes, ks));
      const uint32_t b0[2] = {b[0], b[1]};
      const uint32_t b1[2] = {b[2], b[3]};
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        ptx::warp_mma_m16n8k16<kIsBf16>(s[mt][2 * np], a[mt], b0);
        ptx::warp_mma_m16n8k16<kIsBf16>(s[mt][2 * np + 1], a[mt], b1);
      }
    }
  }
}

// P as A fragments: the C layout of n8 tiles 2k and 2k+1 is the A layout of k16 step k.
template <bool kIsBf16, int kMT, int kNT>
__device__ __forceinline__ void warp_pack_p(uint32_t (&a)[kMT][kNT / 2][4], const float (&p)[kMT][kNT][4]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int ks = 0; ks < kNT / 2; ++ks) {
      a[mt][ks][0] = pack2<kIsBf16>(p[mt][2 * ks][0], p[mt][2 * ks][1]);
      a[mt][ks][1] = pack2<kIsBf16>(p[mt][2 * ks][2], p[mt][2 * ks][3]);
      a[mt][ks][2] = pack2<kIsBf16>(p[mt][2 * ks + 1][0], p[mt][2 * ks + 1][1]);
      a[mt][ks][3] = pack2<kIsBf16>(p[mt][2 * ks + 1][2], p[mt][2 * ks + 1][3]);
    }
}

// warp:: O[mt][ot] += P (packed A fragments, kKS k16 steps of keys) · V_j (kKS·16 keys x kHeadDim).
template <bool kIsBf16, int kHeadDim, int kMT, int kKS, int kOT>
__device__ __forceinline__ void warp_gemm_pv(float (&o)[kMT][kOT][4], const uint32_t (&a)[kMT][kKS][4],
                                             const LaneAddr<kHeadDim>& v) {
  constexpr int kRowBytes = kHeadDim * 2;
#pragma unroll
  for (int ks = 0; ks < kKS; ++ks) {
#pragma unroll
    for (int dp = 0; dp < kOT / 2; ++dp) {
      uint32_t b[4];
      ptx::warp_ldmatrix_x4_trans(b, v.at(ks * 16 * kRowBytes, dp));
      const uint32_t b0[2] = {b[0], b[1]};
      const uint32_t b1[2] = {b[2], b[3]};
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        ptx::warp_mma_m16n8k16<kIsBf16>(o[mt][2 * dp], a[mt][ks], b0);
        ptx::warp_mma_m16n8k16<kIsBf16>(o[mt][2 * dp + 1], a[mt][ks], b1);
      }
    }
  }
}

}  // namespace fa::cuda::sm80
