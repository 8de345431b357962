// CPU backend: the small fp32 GEMM both flash kernels are built from.
//   C[M, N] (=, +=, or = C·alpha_row +)  A[M, K] · B[K, N]
// A is read by broadcast from any (row, k) strides, so a tile and its transpose serve alike;
// B and C are row-major with N padded to a multiple of 16 lanes. Tiles only: the callers
// keep every operand in a per-thread buffer that fits the L1/L2 caches.
#pragma once

#include <cstdint>
#include <cstring>

#include "cpu/isa.h"
#include "cpu/simd.h"

FA_CPU_BEGIN

enum class Accum {
  store,      // C = A·B
  add,        // C += A·B
  scale_add,  // C = diag(alpha)·C + A·B
};

// Optional band limits for masked blocks, in the tile's own coordinates; lo/hi never decrease
// along their index (true of every Mask), so a register tile checks only its first and last.
//   rows_by_col: column n of C can be nonzero only in rows [lo[n], hi[n]); a register tile
//                entirely outside is skipped and its C left unwritten (the caller masks it).
//   k_by_row:    row m of A is zero outside k in [lo[m], hi[m]); the k loop is cut to that.
struct Band {
  enum Kind { none, rows_by_col, k_by_row } kind = none;
  const int64_t* lo = nullptr;
  const int64_t* hi = nullptr;
};

// Register tile: kMr rows × kNv vectors of 16 lanes. AVX-512: 24 accumulators out of 32 zmm
// registers; measured (fwd, S=4096, D=128, fp32, 1 core): 6×4 beat 4×4 and 8×3. AVX2 (a vector
// is 2 ymm of the 16): 6×1, measured 1.4× 6×2 and 1.1× 3×2 (fwd+bwd, S=1k, fp32, 2 cores); SSE2
// and NEON (4 xmm / q registers a vector): 3×1 (2×1 to 6×1 within 5% on SSE2).
#if defined(__AVX512F__)
constexpr int kMr = 6;
constexpr int kNv = 4;
#elif defined(__AVX__)
constexpr int kMr = 6;
constexpr int kNv = 1;
#else
constexpr int kMr = 3;
constexpr int kNv = 1;
#endif

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
  static_assert(kNv <= 4, "the switch below covers 1..4 vectors");
  switch (nv) {
    case 4: micro_tile<MR, 4, mode>(K, A, a_row, a_k, B, ldb, C, ldc, alpha); break;
    case 3: micro_tile<MR, 3, mode>(K, A, a_row, a_k, B, ldb, C, ldc, alpha); break;
    case 2: micro_tile<MR, 2, mode>(K, A, a_row, a_k, B, ldb, C, ldc, alpha); break;
    default: micro_tile<MR, 1, mode>(K, A, a_row, a_k, B, ldb, C, ldc, alpha); break;
  }
}

}  // namespace detail

// C[M, N] op A[M, K]·B[K, N]; N a multiple of 16. A(m, k) = A[m·a_row + k·a_k].
// alpha (scale_add only): one factor per row of C. band: see Band.
template <Accum mode>
void tile_gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t a_row, int64_t a_k,
               const float* B, int64_t ldb, float* C, int64_t ldc, const float* alpha = nullptr,
               Band band = {}) {
  static_assert(kMr <= 6, "the switch below covers 1..6 rows");
  constexpr int64_t kPanel = kNv * simd::kLanes;
  // B panel (K × 64 floats) outer so that it stays in L1 while the row tiles of A pass by.
  for (int64_t n0 = 0; n0 < N; n0 += kPanel) {
    const int64_t n1 = N - n0 < kPanel ? N : n0 + kPanel;
    const int nv = int((n1 - n0) / simd::kLanes);
    for (int64_t m0 = 0; m0 < M; m0 += kMr) {
      const int64_t mr = M - m0 < kMr ? M - m0 : kMr;
      if (band.kind == Band::rows_by_col && (m0 >= band.hi[n1 - 1] || m0 + mr <= band.lo[n0])) continue;
      int64_t k0 = 0, k1 = K;
      if (band.kind == Band::k_by_row) {
        k0 = band.lo[m0];
        k1 = band.hi[m0 + mr - 1];
        if (k1 < k0) k1 = k0;
      }
      const float* Am = A + m0 * a_row + k0 * a_k;
      const float* Bp = B + k0 * ldb + n0;
      float* Cm = C + m0 * ldc + n0;
      const float* al = mode == Accum::scale_add ? alpha + m0 : nullptr;
      const int64_t kk = k1 - k0;
      switch (mr) {
        case 6: detail::micro_rows<6, mode>(nv, kk, Am, a_row, a_k, Bp, ldb, Cm, ldc, al); break;
        case 5: detail::micro_rows<5, mode>(nv, kk, Am, a_row, a_k, Bp, ldb, Cm, ldc, al); break;
        case 4: detail::micro_rows<4, mode>(nv, kk, Am, a_row, a_k, Bp, ldb, Cm, ldc, al); break;
        case 3: detail::micro_rows<3, mode>(nv, kk, Am, a_row, a_k, Bp, ldb, Cm, ldc, al); break;
        case 2: detail::micro_rows<2, mode>(nv, kk, Am, a_row, a_k, Bp, ldb, Cm, ldc, al); break;
        default: detail::micro_rows<1, mode>(nv, kk, Am, a_row, a_k, Bp, ldb, Cm, ldc, al); break;
      }
    }
  }
}

FA_CPU_END

// ---------------------------------------------------------------------------------------------
// bf16 pairs (AVX512-BF16): C[M, N] = A[M, K]·B[K, N] with bf16 A and B, fp32 C.
// vdpbf16ps multiplies bf16 pairs exactly (an 8-bit by 8-bit significand fits fp32) and adds
// both products into the fp32 accumulator: fp32 accumulation at twice the FMA rate. K is even.
//   A: row-major bf16, A(m, k) = A[m·a_row + k], pairs (k, k+1) adjacent (k even).
//   B: packed in pairs, B(k, n) = B[(k/2)·ldb + 2n + (k & 1)]  (see pack_pairs_transposed).
#if defined(__AVX512BF16__)
FA_CPU_BEGIN

constexpr bool kHaveBf16Dot = true;

namespace detail {

template <int MR, int NV>
inline void micro_tile_bf16(int64_t K2, const uint16_t* __restrict A, int64_t a_row,
                            const uint16_t* __restrict B, int64_t ldb, float* __restrict C, int64_t ldc) {
  __m512 c[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) c[r][v] = _mm512_setzero_ps();
  for (int64_t kk = 0; kk < K2; ++kk) {
    __m512bh b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = (__m512bh)_mm512_loadu_si512(B + kk * ldb + v * 2 * simd::kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      int32_t pair;
      std::memcpy(&pair, A + r * a_row + 2 * kk, 4);
      const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) c[r][v] = _mm512_dpbf16_ps(c[r][v], a, b[v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(C + r * ldc + v * simd::kLanes, c[r][v]);
}

template <int MR>
inline void micro_rows_bf16(int nv, int64_t K2, const uint16_t* A, int64_t a_row, const uint16_t* B,
                            int64_t ldb, float* C, int64_t ldc) {
  switch (nv) {
    case 4: micro_tile_bf16<MR, 4>(K2, A, a_row, B, ldb, C, ldc); break;
    case 3: micro_tile_bf16<MR, 3>(K2, A, a_row, B, ldb, C, ldc); break;
    case 2: micro_tile_bf16<MR, 2>(K2, A, a_row, B, ldb, C, ldc); break;
    default: micro_tile_bf16<MR, 1>(K2, A, a_row, B, ldb, C, ldc); break;
  }
}

}  // namespace detail

// C[M, N] = A[M, K]·B[K, N]; N a multiple of 16, K even. band: rows_by_col only.
inline void tile_gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t a_row,
                           const uint16_t* B, int64_t ldb, float* C, int64_t ldc, Band band = {}) {
  constexpr int64_t kPanel = kNv * simd::kLanes;
  const int64_t K2 = K / 2;
  for (int64_t n0 = 0; n0 < N; n0 += kPanel) {
    const int64_t n1 = N - n0 < kPanel ? N : n0 + kPanel;
    const int nv = int((n1 - n0) / simd::kLanes);
    const uint16_t* Bp = B + 2 * n0;
    for (int64_t m0 = 0; m0 < M; m0 += kMr) {
      const int64_t mr = M - m0 < kMr ? M - m0 : kMr;
      if (band.kind == Band::rows_by_col && (m0 >= band.hi[n1 - 1] || m0 + mr <= band.lo[n0])) continue;
      const uint16_t* Am = A + m0 * a_row;
      float* Cm = C + m0 * ldc + n0;
      switch (mr) {
        case 6: detail::micro_rows_bf16<6>(nv, K2, Am, a_row, Bp, ldb, Cm, ldc); break;
        case 5: detail::micro_rows_bf16<5>(nv, K2, Am, a_row, Bp, ldb, Cm, ldc); break;
        case 4: detail::micro_rows_bf16<4>(nv, K2, Am, a_row, Bp, ldb, Cm, ldc); break;
        case 3: detail::micro_rows_bf16<3>(nv, K2, Am, a_row, Bp, ldb, Cm, ldc); break;
        case 2: detail::micro_rows_bf16<2>(nv, K2, Am, a_row, Bp, ldb, Cm, ldc); break;
        default: detail::micro_rows_bf16<1>(nv, K2, Am, a_row, Bp, ldb, Cm, ldc); break;
      }
    }
  }
}

FA_CPU_END
#else
FA_CPU_BEGIN
constexpr bool kHaveBf16Dot = false;
// Never called without AVX512-BF16 (guarded by kHaveBf16Dot); keeps the callers compiling.
inline void tile_gemm_bf16(int64_t, int64_t, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t,
                           float*, int64_t, Band = {}) {}
FA_CPU_END
#endif
