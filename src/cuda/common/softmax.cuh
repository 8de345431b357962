// CUDA backend, common/: online softmax in the log2 domain over mma accumulator fragments.
// Rows are spread over the 4 lanes of a quad (C layout: c0 c1 row g, c2 c3 row g+8); the
// row max is reduced across the quad at every step, the row sum only at the end. No memory.
#pragma once

#include <cmath>

#include "cuda/ptx/math.cuh"

namespace fa::cuda {

// tanh for the softcap, S' = c·tanh(S·scale / c): 1 − 2 / (1 + 2^(2·log2e·x)), two MUFU
// operations and no branch; absolute error a few 1e-8 (what S' needs: P = exp2(S'·log2e − LSE)
// sees c times it), ±1 for |x| large (2^x overflows to inf, or flushes to 0), NaN kept.
__device__ __forceinline__ float softcap_tanh(float x) {
  return 1.f - 2.f * ptx::rcp_approx(1.f + ptx::ex2_approx(x * 2.88539008177792681f));
}

// One warp's rows: kMT m16 tiles, each lane holding 2 rows per tile (g and g + 8).
template <int kMT>
struct OnlineSoftmax {
  float row_max[kMT][2];  // m, in score units (before score_log2)
  float row_sum[kMT][2];  // l, this lane's partial sum of P (quad-reduced in finish())

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        row_max[mt][h] = -INFINITY;
        row_sum[mt][h] = 0.f;
      }
    }
  }

  // S (kMT x kNT tiles) becomes P = exp2(S·score_log2 − m_new·score_log2); O is rescaled.
  template <int kNT, int kOT>
  __device__ __forceinline__ void step(float (&s)[kMT][kNT][4], float (&o)[kMT][kOT][4],
                                       float score_log2) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) rescale(s, o, mt, h, new_max(s, mt, h), score_log2);
    }
  }

  // step() for rows whose keys are split over several warps: each holds some of S's columns
  // and some of O's. join(m) must turn every warp's m_new[kMT][2] into the same maximum over
  // all of them (e.g. an exchange through shared memory); each warp's l then sums its own keys.
  template <int kNT, int kOT, class Join>
  __device__ __forceinline__ void step_joint(float (&s)[kMT][kNT][4], float (&o)[kMT][kOT][4],
                                             float score_log2, Join&& join) {
    float m_new[kMT][2];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) m_new[mt][h] = new_max(s, mt, h);
    }
    join(m_new);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) rescale(s, o, mt, h, m_new[mt][h], score_log2);
    }
  }

  // m_new = max(m_old, rowmax(S)) for row h of m-tile mt, reduced over the quad.
  template <int kNT>
  __device__ __forceinline__ float new_max(const float (&s)[kMT][kNT][4], int mt, int h) const {
    float m_new = row_max[mt][h];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      m_new = fmaxf(m_new, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
    }
    m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 1));
    return fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 2));
  }

  // Row h of m-tile mt moves to the maximum m_new: S becomes P, l and O are rescaled.
  template <int kNT, int kOT>
  __device__ __forceinline__ void rescale(float (&s)[kMT][kNT][4], float (&o)[kMT][kOT][4], int mt,
                                          int h, float m_new, float score_log2) {
    // A row that has seen no key yet keeps m = -inf; shift by 0 there so exp2 gives 0.
    const float m_scaled = m_new == -INFINITY ? 0.f : m_new * score_log2;
    // alpha = exp2(m_old·score_log2 − m_new·score_log2)   (0 on the first visible block)
    const float alpha = ptx::ex2_approx(row_max[mt][h] * score_log2 - m_scaled);
    row_max[mt][h] = m_new;
    // P_ij = exp2(S_ij·score_log2 − m_new·score_log2);  l = alpha·l + rowsum(P_ij)
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pv = ptx::ex2_approx(fmaf(s[mt][nt][2 * h + e], score_log2, -m_scaled));
        s[mt][nt][2 * h + e] = pv;
        sum += pv;
      }
    }
    row_sum[mt][h] = fmaf(row_sum[mt][h], alpha, sum);
    // O = alpha·O
#pragma unroll
    for (int ot = 0; ot < kOT; ++ot) {
      o[mt][ot][2 * h] *= alpha;
      o[mt][ot][2 * h + 1] *= alpha;
    }
  }

  // Quad-reduces l; returns per row 1/l (0 for a row that saw no key) and the natural LSE
  // = ln2·(m·score_log2 + log2 l)  (−inf for a row that saw no key).
  __device__ __forceinline__ void finish(float score_log2, float (&inv_l)[kMT][2],
                                         float (&lse)[kMT][2]) {
    constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float l = row_sum[mt][h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const bool seen = l != 0.f;  // l >= 0; a NaN l (NaN input) stays NaN in O and LSE
        inv_l[mt][h] = seen ? 1.f / l : 0.f;
        lse[mt][h] = seen ? (row_max[mt][h] * score_log2 + ptx::lg2_approx(l)) * kLn2 : -INFINITY;
      }
    }
  }
};

}  // namespace fa::cuda
