// CPU backend: the small fp32 GEMM both flash kernels are built from.
//   C[M, N] (=, +=, or = C·alpha_row +)  A[M, K] · B[K, N]
// A is read by broadcast from any (row, k) strides, so a tile and its transpose serve alike;
// B and C are row-major with N padded to a multiple of 16 lanes. Tiles only: the callers
// keep every operand in a per-thread buffer that fits the L1/L2 caches.
#pragma once

#include <cstdint>

#include "cpu/simd.h"

namespace fa::cpu {

enum class Accum {
  store,      // C = A·B
  add,        // C += A·B
  scale_add,  // C = diag(alpha)·C + A·B
};

// Register tile: kMr rows × kNv vectors of 16 lanes = 24 accumulators out of 32 zmm registers.
// Measured (fwd, S=4096, D=128, fp32, 1 core): 6×4 beat 4×4 and 8×3.
constexpr int kMr = 6;
constexpr int kNv = 4;

namespace detail {

template <int MR, int NV, Accum mode>
inline void micro_tile(int64_t K, const float* __restrict A, int64_t a_row, int64_t a_k,
                       const float* __restrict B, int64_t ldb, float* __restrict C, int64_t ldc,
                       const float* __restrict alpha) {
  using namespace simd;
  V16 c[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      if constexpr (mode == Accum::store)
        c[r][v] = zero();
      else if constexpr (mode == Accum::add)
        c[r][v] = load(C + r * ldc + v * kLanes);
      else
        c[r][v] = load(C + r * ldc + v * kLanes) * set1(alpha[r]);
    }
  }
  for (int64_t k = 0; k < K; ++k) {
    V16 b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = load(B + k * ldb + v * kLanes);
    const float* a = A + k * a_k;
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const V16 ar = set1(a[r * a_row]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) c[r][v] = fma(ar, b[v], c[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) store(C + r * ldc + v * kLanes, c[r][v]);
  }
}

template <int MR, Accum mode>
inline void micro_rows(int nv, int64_t K, const float* A, int64_t a_row, int64_t a_k, const float* B,
                       int64_t ldb, float* C, int64_t ldc, const float* alpha) {
  static_assert(kNv == 4, "the switch below covers 1..4 vectors");
  switch (nv) {
    case 4: micro_tile<MR, 4, mode>(K, A, a_row, a_k, B, ldb, C, ldc, alpha); break;
    case 3: micro_tile<MR, 3, mode>(K, A, a_row, a_k, B, ldb, C, ldc, alpha); break;
    case 2: micro_tile<MR, 2, mode>(K, A, a_row, a_k, B, ldb, C, ldc, alpha); break;
    default: micro_tile<MR, 1, mode>(K, A, a_row, a_k, B, ldb, C, ldc, alpha); break;
  }
}

}  // namespace detail

// C[M, N] op A[M, K]·B[K, N]; N a multiple of 16. A(m, k) = A[m·a_row + k·a_k].
// alpha (scale_add only): one factor per row of C.
template <Accum mode>
void tile_gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t a_row, int64_t a_k,
               const float* B, int64_t ldb, float* C, int64_t ldc, const float* alpha = nullptr) {
  static_assert(kMr == 6, "the switch below covers 1..6 rows");
  constexpr int64_t kPanel = kNv * simd::kLanes;
  // B panel (K × 64 floats) outer so that it stays in L1 while the row tiles of A pass by.
  for (int64_t n0 = 0; n0 < N; n0 += kPanel) {
    const int nv = int((N - n0 < kPanel ? N - n0 : kPanel) / simd::kLanes);
    const float* Bp = B + n0;
    for (int64_t m0 = 0; m0 < M; m0 += kMr) {
      const float* Am = A + m0 * a_row;
      float* Cm = C + m0 * ldc + n0;
      const float* al = mode == Accum::scale_add ? alpha + m0 : nullptr;
      switch (M - m0 < kMr ? M - m0 : kMr) {
        case 6: detail::micro_rows<6, mode>(nv, K, Am, a_row, a_k, Bp, ldb, Cm, ldc, al); break;
        case 5: detail::micro_rows<5, mode>(nv, K, Am, a_row, a_k, Bp, ldb, Cm, ldc, al); break;
        case 4: detail::micro_rows<4, mode>(nv, K, Am, a_row, a_k, Bp, ldb, Cm, ldc, al); break;
        case 3: detail::micro_rows<3, mode>(nv, K, Am, a_row, a_k, Bp, ldb, Cm, ldc, al); break;
        case 2: detail::micro_rows<2, mode>(nv, K, Am, a_row, a_k, Bp, ldb, Cm, ldc, al); break;
        default: detail::micro_rows<1, mode>(nv, K, Am, a_row, a_k, Bp, ldb, Cm, ldc, al); break;
      }
    }
  }
}

}  // namespace fa::cpu
