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

// cta:: scope: all kThreads threads call cta_load() with the same arguments. kRowThreads
// threads share a row, thread t copying chunks t % kRowThreads + j·kRowThreads of rows
// t / kRowThreads + i·kRowStep. Both steps keep the swizzle's XOR key (row % 8) and leave the
// chunk bits it touches alone, so every copy is one base address plus constants. Rows >=
// rows_valid and columns >= cols_valid (a multiple of 8) are zero-filled and never read; a
// whole tile (the uniform common case) copies without predicates.
template <class T, int kHeadDim, int kRows, int kThreads>
struct TileLoader {
  static constexpr int kChunks = kHeadDim / 8;
  static constexpr int kRowThreads = kChunks < kThreads / 8 ? kChunks : kThreads / 8;
  static constexpr int kRowStep = kThreads / kRowThreads;
  static constexpr int kIters = kRows / kRowStep;
  static constexpr int kRowCopies = kChunks / kRowThreads;
  static_assert(kRowThreads % 8 == 0 && kRowStep % 8 == 0 && kRows % kRowStep == 0 &&
                    kChunks % kRowThreads == 0,
                "loader mapping");

  int row0;
  int chunk;

  __device__ __forceinline__ explicit TileLoader(int tid)
      : row0(tid / kRowThreads), chunk(tid % kRowThreads) {}

  __device__ __forceinline__ void cta_load(uint32_t smem_tile, const T* rows, int64_t row_stride,
                                           int rows_valid, int cols_valid) const {
    const T* src = rows + row0 * row_stride + chunk * 8;
    const uint32_t dst = smem_tile + Swizzle<kHeadDim>::offset(row0, chunk);
    const int64_t step = kRowStep * row_stride;
    constexpr int kDstRow = kRowStep * kHeadDim * 2;  // bytes between a thread's rows
    if (rows_valid >= kRows && cols_valid >= kHeadDim) {
#pragma unroll
      for (int i = 0; i < kIters; ++i, src += step)
#pragma unroll
        for (int j = 0; j < kRowCopies; ++j) ptx::cp_async_16(dst + i * kDstRow + j * kRowThreads * 16, src + j * kRowThreads * 8);
      return;
    }
#pragma unroll
    for (int i = 0; i < kIters; ++i, src += step) {
      const bool row_ok = row0 + i * kRowStep < rows_valid;
#pragma unroll
      for (int j = 0; j < kRowCopies; ++j) {
        const bool ok = row_ok && (chunk + j * kRowThreads) * 8 < cols_valid;
        // rows (row 0 of the tile, always in range) is a valid address for the zero-fill case.
        ptx::cp_async_16(dst + i * kDstRow + j * kRowThreads * 16, ok ? src + j * kRowThreads * 8 : rows, ok);
      }
    }
  }
};

// Per-lane ldmatrix addressing. Every tile row base is a multiple of 8 and every tile (and
// half-row column offset) a multiple of 128 bytes, so a lane's row % 8 is lane % 8 and the
// swizzle touches only bits 4-6 of its address: the chunk of k-step `step` (16 columns, chunks
// 2·step and 2·step + 1) is the lane's step-0 chunk XOR (2·step % 8), plus 2·step & ~7 whole
// chunks. at() is then one XOR with a constant; the rest folds into the instruction's offset.
template <int kHeadDim>
struct LaneAddr {
  static constexpr int kRowBytes = kHeadDim * 2;
  uint32_t base;  // smem address of this lane's 16-byte row piece of k-step 0, swizzled

  // The XOR as inline PTX: ptxas still hoists the up-to-4 variants per operand out of the key
  // loop, but written as plain C++ the whole address was hoisted and the D = 128 kernel spilled
  // 140 bytes (sm_90); this form keeps every sm80 forward kernel at 0 bytes but D = 256's 28.
  __device__ __forceinline__ uint32_t at(int row_offset_bytes, int step) const {
    uint32_t a = base;
    if (((2 * step) & 7) != 0)
      asm volatile("xor.b32 %0, %1, %2;\n" : "=r"(a) : "r"(base), "r"(((2 * step) & 7) << 4));
    return a + static_cast<uint32_t>(((2 * step) & ~7) << 4) + row_offset_bytes;
  }
};

// The lane's address: row `row` (row % 8 == lane % 8), chunk `chunk` (0 or 1) of a tile.
template <int kHeadDim>
__device__ __forceinline__ LaneAddr<kHeadDim> lane_addr(uint32_t tile, int row, int chunk) {
  return {tile + row * LaneAddr<kHeadDim>::kRowBytes + ((chunk ^ (row & 7)) << 4)};
}
// A operand (Q rows, row-major [m][k]): matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15),
// (8-15, 8-15) -> a0..a3. Lane l gives row l%8 + 8·((l/8)%2), chunk l/16.
template <int kHeadDim>
__device__ __forceinline__ LaneAddr<kHeadDim> lane_addr_a(uint32_t tile, int first_row, int lane) {
  return lane_addr<kHeadDim>(tile, first_row + (lane & 7) + 8 * ((lane >> 3) & 1), lane >> 4);
}
// B operand from K rows ([n][k], "col" B): matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15,
// k 0-7), (n 8-15, k 8-15) -> b0 b1 of n-tile 0, b0 b1 of n-tile 1. Lane l: row l%8 + 8·(l/16),
// chunk (l/8)%2.
template <int kHeadDim>
__device__ __forceinline__ LaneAddr<kHeadDim> lane_addr_bt(uint32_t tile, int lane) {
  return lane_addr<kHeadDim>(tile, (lane & 7) + 8 * (lane >> 4), (lane >> 3) & 1);
}
// B operand from V rows ([k][n], transposed by ldmatrix.trans): matrices (k 0-7, n 0-7),
// (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15). Lane l: row l%8 + 8·((l/8)%2), chunk l/16.
template <int kHeadDim>
__device__ __forceinline__ LaneAddr<kHeadDim> lane_addr_b(uint32_t tile, int lane) {
  return lane_addr<kHeadDim>(tile, (lane & 7) + 8 * ((lane >> 3) & 1), lane >> 4);
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

// warp:: a lane's words (any array of uint32_t), for the lane of the same index in another warp
// to read back with warp_fetch: word i of lane l at area + ((i / 4)·32 + l)·16 + (i % 4)·4, so
// 16-byte accesses without bank conflicts.
template <class Words>
__device__ __forceinline__ void warp_stash(uint32_t area, const Words& words) {
  constexpr int kWords = sizeof(Words) / 4;
  static_assert(kWords % 4 == 0, "16-byte words");
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&words);
  const uint32_t lane_area = area + (threadIdx.x % 32) * 16;
#pragma unroll
  for (int i = 0; i < kWords; i += 4)
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(lane_area + i * 128), "r"(w[i]),
                 "r"(w[i + 1]), "r"(w[i + 2]), "r"(w[i + 3])
                 : "memory");
}
template <class Words>
__device__ __forceinline__ void warp_fetch(uint32_t area, Words& words) {
  constexpr int kWords = sizeof(Words) / 4;
  static_assert(kWords % 4 == 0, "16-byte words");
  uint32_t* w = reinterpret_cast<uint32_t*>(&words);
  const uint32_t lane_area = area + (threadIdx.x % 32) * 16;
#pragma unroll
  for (int i = 0; i < kWords; i += 4)
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(w[i]), "=r"(w[i + 1]), "=r"(w[i + 2]), "=r"(w[i + 3])
                 : "r"(lane_area + i * 128)
                 : "memory");
}

}  // namespace fa::cuda::sm80
