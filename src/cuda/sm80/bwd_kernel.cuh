// CUDA backend, sm80/: the backward main kernel (FlashAttention-2 design, mma.sync m16n8k16).
// One CTA per (kv block, kv head, batch): K/V stationary in shared memory, dK/dV in registers,
// Q blocks (and the group's query heads) inner; dQ leaves through fp32 atomics. Host-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/common/convert.cuh"
#include "cuda/common/softmax.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/math.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/ptx/red.cuh"
#include "cuda/sm80/bwd_config.h"
#include "cuda/sm80/bwd_params.h"

namespace fa::cuda::sm80 {

// Warp w owns kv rows 16·(w % kRowWarps) .. +15 of the block and, of those rows, the dK/dV
// columns slice (w / kRowWarps). Without a split (kSplitD = 1) it computes Sᵀ = K Qᵀ and
// dPᵀ = V dOᵀ for its rows, so Pᵀ and dSᵀ come out of the accumulators already in the
// A-fragment layout of dV += Pᵀ dO and dK += dSᵀ Q: neither goes through shared memory. With a
// split, the kSplitD warps of one row group each compute Sᵀ/dPᵀ for a kBlockM / kSplitD column
// slice, stage Pᵀ and dSᵀ, sync as a group, and read the whole rows back as A fragments.
// dSᵀ is staged in every case for dQ = dS K.
template <int kHeadDim_, bool kIsBf16_>
struct BwdKernel {
  using Params = BwdParams;
  using Config = BwdConfig<kHeadDim_>;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kIsBf16 = kIsBf16_;
  using T = typename Storage<kIsBf16>::type;

  static constexpr int kWarps = Config::kWarps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMinBlocks = Config::kMinBlocks;
  static constexpr int kSplitD = Config::kSplitD;
  static constexpr int kRowWarps = kWarps / kSplitD;
  static constexpr int kBlockN = Config::kBlockN;  // kv rows per CTA
  static constexpr int kBlockM = Config::kBlockM;  // q rows per inner step
  static_assert(kBlockN == 16 * kRowWarps, "each row warp owns 16 kv rows");
  static constexpr int kSliceD = kHeadDim / kSplitD;
  static constexpr int kSdpCols = kBlockM / kSplitD;  // q columns of Sᵀ/dPᵀ per warp
  static_assert(kSdpCols % 16 == 0, "whole k-steps of dV/dK per warp");
  // dQ = dS K: warps tile [kBlockM, kHeadDim] as kDqWarpsM x kDqWarpsN, 32 rows each.
  static constexpr int kDqWarpsM = kBlockM / 32;
  static constexpr int kDqWarpsN = kWarps / kDqWarpsM;
  static constexpr int kDqTileN = kHeadDim / kDqWarpsN;
  static_assert(kDqTileN % 16 == 0 && kSliceD % 16 == 0 && kHeadDim % 64 == 0, "tile shape");

  // Shared memory (bytes): K, V [kBlockN, kHeadDim]; Q, dO [kBlockM, kHeadDim] x 2 stages;
  // dSᵀ [kBlockN, kBlockM]; LSE and D [kBlockM] x 2 stages; Pᵀ [kBlockN, kBlockM] when the
  // row group is split (kSplitD > 1). Rows are 16-byte-chunk
  // swizzled (chunk ^= row % 8), so ldmatrix and cp.async are bank-conflict free.
  static constexpr int kTileKV = kBlockN * kHeadDim * 2;
  static constexpr int kTileQ = kBlockM * kHeadDim * 2;
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + kTileKV;
  static constexpr int kOffQ = kOffV + kTileKV;
  static constexpr int kOffDO = kOffQ + 2 * kTileQ;
  static constexpr int kOffDS = kOffDO + 2 * kTileQ;
  static constexpr int kOffLse = kOffDS + kBlockN * kBlockM * 2;
  static constexpr int kOffDsum = kOffLse + 2 * kBlockM * 4;
  static constexpr int kOffP = kOffDsum + 2 * kBlockM * 4;
  static constexpr int kSmemBytes = kOffP + (kSplitD > 1 ? kBlockN * kBlockM * 2 : 0);

  static dim3 block() { return dim3(kThreads); }
  static constexpr int smem_bytes() { return kSmemBytes; }
  static int64_t num_kv_blocks(int64_t seqlen_k) { return (seqlen_k + kBlockN - 1) / kBlockN; }
  static int64_t num_q_blocks(int64_t seqlen_q) { return (seqlen_q + kBlockM - 1) / kBlockM; }
  // One CTA per (kv block, kv head, batch), kv block fastest: ascending kv blocks are the
  // longest under a causal mask, and deterministic mode waits on the lower kv blocks.
  static int64_t num_ctas(const BwdParams& p) {
    return num_kv_blocks(p.seqlen_k) * int64_t(p.heads_kv) * p.batch;
  }
  static dim3 grid(const BwdParams& p) { return dim3(static_cast<unsigned>(num_ctas(p))); }
  // Empty when the kernel can run p (the API core has validated the problem itself), else why.
  static std::string can_implement(const BwdParams& p, int smem_optin) {
    if (p.head_dim > kHeadDim || p.head_dim_v > kHeadDim)
      return "head dims " + std::to_string(p.head_dim) + "/" + std::to_string(p.head_dim_v) +
             " exceed the kernel's " + std::to_string(kHeadDim);
    if (num_ctas(p) > 0x7fffffff) return "too many (kv block, head, batch) tiles for one grid";
    if (kSmemBytes > smem_optin)
      return "needs " + std::to_string(kSmemBytes) + " bytes of shared memory per block, the device allows " +
             std::to_string(smem_optin);
    return {};
  }

  // Byte offset of (row, col) in a swizzled tile of kCols 16-bit columns; col % 8 == 0.
  template <int kCols>
  static __device__ __forceinline__ uint32_t swz(int row, int col) {
    static_assert(kCols >= 64, "the swizzle needs 8 chunks per row");
    return uint32_t(row * kCols + (((col >> 3) ^ (row & 7)) << 3)) * 2u;
  }

  // cta:: scope. Async copy of rows [0, rows) x cols [0, cols) of a strided tile into a
  // swizzled [kRows, kHeadDim] tile; the rest is zero-filled. `safe` is any readable address.
  template <int kRows>
  static __device__ __forceinline__ void cta_load_tile(uint32_t dst, const T* src, int64_t row_stride,
                                                       int rows, int cols, const T* safe) {
    constexpr int kChunksPerRow = kHeadDim / 8;
    constexpr int kChunks = kRows * kChunksPerRow;
    static_assert(kChunks % kThreads == 0, "whole chunks per thread");
#pragma unroll
    for (int i = 0; i < kChunks / kThreads; ++i) {
      const int c = i * kThreads + threadIdx.x;
      const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
      const bool ok = r < rows && col < cols;
      ptx::cp_async_16(dst + swz<kHeadDim>(r, col), ok ? src + r * row_stride + col : safe, ok);
    }
  }

  // Index helpers for one (batch, head) pair of sequences.
  struct Seq {
    int sq, sk;          // lengths
    int64_t q_start;     // first packed row (varlen) or 0
    int64_t k_start;
  };

  static __device__ __forceinline__ Seq sequence(const BwdParams& p, int b) {
    Seq s;
    if (p.cu_seqlens_q != nullptr) {
      s.q_start = p.cu_seqlens_q[b];
      s.k_start = p.cu_seqlens_k[b];
      s.sq = int(p.cu_seqlens_q[b + 1] - s.q_start);
      s.sk = int(p.cu_seqlens_k[b + 1] - s.k_start);
    } else {
      s.q_start = s.k_start = 0;
      s.sq = p.seqlen_q;
      s.sk = p.seqlen_k;
    }
    return s;
  }

  // First row r in [0, sq) with pred(r) true for a predicate monotone in r (sq if none).
  template <class Pred>
  static __device__ __forceinline__ int first_row(int sq, Pred pred) {
    int lo = 0, hi = sq;
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (pred(mid)) hi = mid; else lo = mid + 1;
    }
    return lo;
  }

  __device__ void operator()(const BwdParams& p, char* smem) const;
};

template <int kHeadDim, bool kIsBf16>
__device__ void BwdKernel<kHeadDim, kIsBf16>::operator()(const BwdParams& p, char* smem) const {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;  // mma fragment row group / column pair
  const int kv_block = int(blockIdx.x % p.num_kv_blocks);
  const int64_t rest = blockIdx.x / p.num_kv_blocks;
  const int hk = int(rest % p.heads_kv);
  const int b = int(rest / p.heads_kv);

  const Seq seq = sequence(p, b);
  const int kv0 = kv_block * kBlockN;
  if (kv0 >= seq.sk) return;  // varlen: this batch's keys end earlier
  const int kv_rows = min(kBlockN, seq.sk - kv0);
  const int sq = seq.sq, sk = seq.sk;
  const fa::Mask mask = p.mask;

  // Query rows that see some key of this block: [row_lo, row_hi) (key_begin/key_end monotone).
  const int row_lo = first_row(sq, [&](int r) { return mask.key_end(r, sq, sk) > kv0; });
  const int row_hi = first_row(sq, [&](int r) { return mask.key_begin(r, sq, sk) >= kv0 + kv_rows; });
  // Both ends are monotone in kv0, so the kv blocks visiting a q block form an interval
  // (deterministic mode counts on it); a block of fully masked rows is harmless (P = 0).
  const int qb_first = row_lo / kBlockM;
  const int qb_end = (row_hi + kBlockM - 1) / kBlockM;
  const int n_qb = qb_end > qb_first ? qb_end - qb_first : 0;
  const int steps = n_qb * p.group;  // (query head, q block) pairs, q block fastest

  const uint32_t s_base = ptx::smem_u32(smem);
  const uint32_t sK = s_base + kOffK, sV = s_base + kOffV, sDS = s_base + kOffDS;
  const float* sLse = reinterpret_cast<const float*>(smem + kOffLse);
  const float* sDsum = reinterpret_cast<const float*>(smem + kOffDsum);

  const T* q_all = static_cast<const T*>(p.q);
  const T* do_all = static_cast<const T*>(p.dout);
  const T* k_ptr = static_cast<const T*>(p.k) + b * p.k_batch_stride +
                   (seq.k_start + kv0) * p.k_row_stride + hk * p.k_head_stride;
  const T* v_ptr = static_cast<const T*>(p.v) + b * p.v_batch_stride +
                   (seq.k_start + kv0) * p.v_row_stride + hk * p.v_head_stride;

  // Issues the loads of step `s` (query head, q block) into stage s % 2.
  auto load_step = [&](int s) {
    const int h = hk * p.group + s / n_qb;
    const int q0 = (qb_first + s % n_qb) * kBlockM;
    const int rows = min(kBlockM, sq - q0);
    const int stage = s & 1;
    const int64_t qrow = seq.q_start + q0;
    cta_load_tile<kBlockM>(s_base + kOffQ + stage * kTileQ,
                           q_all + b * p.q_batch_stride + qrow * p.q_row_stride + h * p.q_head_stride,
                           p.q_row_stride, rows, p.head_dim, q_all);
    cta_load_tile<kBlockM>(s_base + kOffDO + stage * kTileQ,
                           do_all + b * p.do_batch_stride + qrow * p.do_row_stride + h * p.do_head_stride,
                           p.do_row_stride, rows, p.head_dim_v, do_all);
    const int64_t lse_row = p.cu_seqlens_q != nullptr ? int64_t(h) * p.total_q + qrow
                                                       : (int64_t(b) * p.heads_q + h) * p.seqlen_q + q0;
    if (tid < kBlockM) {
      const bool ok = tid < rows;
      ptx::cp_async_4(s_base + kOffLse + stage * kBlockM * 4 + tid * 4, ok ? p.lse + lse_row + tid : p.lse, ok);
    } else if (tid < 2 * kBlockM) {
      const int r = tid - kBlockM;
      const bool ok = r < rows;
      ptx::cp_async_4(s_base + kOffDsum + stage * kBlockM * 4 + r * 4, ok ? p.dsum + lse_row + r : p.dsum, ok);
    }
  };

  // Prologue: K, V and the first step in one group.
  cta_load_tile<kBlockN>(sK, k_ptr, p.k_row_stride, kv_rows, p.head_dim, static_cast<const T*>(p.k));
  cta_load_tile<kBlockN>(sV, v_ptr, p.v_row_stride, kv_rows, p.head_dim_v, static_cast<const T*>(p.v));
  if (steps > 0) load_step(0);
  ptx::cp_async_commit();

  const int wr = warp % kRowWarps;  // kv row group of this warp
  const int wd = warp / kRowWarps;  // dK/dV column slice of this warp
  float acc_dk[kSliceD / 8][4], acc_dv[kSliceD / 8][4];
#pragma unroll
  for (int i = 0; i < kSliceD / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_dk[i][e] = acc_dv[i][e] = 0.f;

  // Per-lane ldmatrix row/column offsets (rows advance in multiples of 8, so row % 8 = lane % 8).
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;   // A, [m][k]
  const int bn_row = (lane & 7) + (lane >> 4) * 8, bn_col = ((lane >> 3) & 1) * 8;  // B, [n][k]
  const int bt_row = a_row, bt_col = a_col;                                           // B, [k][n] .trans
  const int at_row = bn_row, at_col = bn_col;                                         // A, [k][m] .trans
  const int dq_wm = warp / kDqWarpsN, dq_wn = warp % kDqWarpsN;

  for (int s = 0; s < steps; ++s) {
    const int stage = s & 1;
    const int h = hk * p.group + s / n_qb;
    const int qb = qb_first + s % n_qb;
    const int q0 = qb * kBlockM;
    if (s + 1 < steps) load_step(s + 1);
    ptx::cp_async_commit();
    ptx::cp_async_wait<1>();
    __syncthreads();  // stage `stage` landed for all; everyone is done with step s-1's dSᵀ

    const uint32_t sQ = s_base + kOffQ + stage * kTileQ;
    const uint32_t sDO = s_base + kOffDO + stage * kTileQ;

    // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ for this warp's 16 kv rows and q columns qc0 .. +kSdpCols.
    const int qc0 = wd * kSdpCols;
    float acc_s[kSdpCols / 8][4], acc_dp[kSdpCols / 8][4];
#pragma unroll
    for (int i = 0; i < kSdpCols / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[i][e] = acc_dp[i][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
      uint32_t ak[4], av[4];
      ptx::warp_ldmatrix_x4(ak, sK + swz<kHeadDim>(wr * 16 + a_row, ks * 16 + a_col));
      ptx::warp_ldmatrix_x4(av, sV + swz<kHeadDim>(wr * 16 + a_row, ks * 16 + a_col));
#pragma unroll
      for (int n2 = 0; n2 < kSdpCols / 16; ++n2) {
        uint32_t bq[4], bd[4];
        ptx::warp_ldmatrix_x4(bq, sQ + swz<kHeadDim>(qc0 + n2 * 16 + bn_row, ks * 16 + bn_col));
        ptx::warp_ldmatrix_x4(bd, sDO + swz<kHeadDim>(qc0 + n2 * 16 + bn_row, ks * 16 + bn_col));
        ptx::warp_mma_m16n8k16<kIsBf16>(acc_s[2 * n2], ak, {bq[0], bq[1]});
        ptx::warp_mma_m16n8k16<kIsBf16>(acc_s[2 * n2 + 1], ak, {bq[2], bq[3]});
        ptx::warp_mma_m16n8k16<kIsBf16>(acc_dp[2 * n2], av, {bd[0], bd[1]});
        ptx::warp_mma_m16n8k16<kIsBf16>(acc_dp[2 * n2 + 1], av, {bd[2], bd[3]});
      }
    }

    // P = exp2(S'·log2e − LSE·log2e), S' = scale·S or c·tanh(scale·S / c);
    // dS_x = P ∘ (dP − D) (∘ (1 − tanh²) under softcap). Masked and padded entries: P = 0.
    const bool full = q0 + kBlockM <= sq && kv_rows == kBlockN &&
                      mask.key_begin(q0 + kBlockM - 1, sq, sk) <= kv0 &&
                      mask.key_end(q0, sq, sk) >= kv0 + kBlockN;
#pragma unroll
    for (int nt = 0; nt < kSdpCols / 8; ++nt) {
      const int col = qc0 + nt * 8 + 2 * t4;
      const float2 lse = *reinterpret_cast<const float2*>(sLse + stage * kBlockM + col);
      const float2 dsum = *reinterpret_cast<const float2*>(sDsum + stage * kBlockM + col);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = col + (e & 1);
        const int r = wr * 16 + g + (e >> 1) * 8;
        const float l = (e & 1) ? lse.y : lse.x;
        // A row with no visible key has LSE = −inf: use +inf so that P = 0, never NaN.
        const float l2 = l == -INFINITY ? INFINITY : l * 1.4426950408889634f;
        const float d = (e & 1) ? dsum.y : dsum.x;
        float x, chain = 1.f;
        if (p.softcap > 0.f) {
          const float th = softcap_tanh(acc_s[nt][e] * p.softcap_in);
          x = th * p.score_log2;
          chain = 1.f - th * th;
        } else {
          x = acc_s[nt][e] * p.score_log2;
        }
        float pr = ptx::ex2_approx(x - l2);
        if (!full && !(q0 + c < sq && r < kv_rows && mask.visible(q0 + c, kv0 + r, sq, sk))) pr = 0.f;
        acc_s[nt][e] = pr;
        acc_dp[nt][e] = pr * (acc_dp[nt][e] - d) * chain;
      }
    }

    // Pᵀ, dSᵀ as bf16/fp16 pairs: C fragment pairs of n-tiles 2kk, 2kk+1 = A fragment of k-step kk.
    uint32_t ap_own[kSdpCols / 16][4], ads_own[kSdpCols / 16][4];
#pragma unroll
    for (int kk = 0; kk < kSdpCols / 16; ++kk) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int nt = 2 * kk + (i >> 1), e = (i & 1) * 2;
        ap_own[kk][i] = pack2<kIsBf16>(acc_s[nt][e], acc_s[nt][e + 1]);
        ads_own[kk][i] = pack2<kIsBf16>(acc_dp[nt][e], acc_dp[nt][e + 1]);
      }
    }
    // Stage dSᵀ [kv][q] for dQ (and Pᵀ when the row group is split): one writer per element.
    auto warp_stage = [&](uint32_t buf, int kk, const uint32_t (&x)[4]) {
      const int r = wr * 16 + g;
      const int c0 = qc0 + kk * 16 + 2 * t4;
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(buf + swz<kBlockM>(r, c0 & ~7) + (c0 & 7) * 2), "r"(x[0]));
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(buf + swz<kBlockM>(r + 8, c0 & ~7) + (c0 & 7) * 2), "r"(x[1]));
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(buf + swz<kBlockM>(r, (c0 + 8) & ~7) + (c0 & 7) * 2), "r"(x[2]));
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(buf + swz<kBlockM>(r + 8, (c0 + 8) & ~7) + (c0 & 7) * 2), "r"(x[3]));
    };
#pragma unroll
    for (int kk = 0; kk < kSdpCols / 16; ++kk) {
      warp_stage(sDS, kk, ads_own[kk]);
      if constexpr (kSplitD > 1) warp_stage(s_base + kOffP, kk, ap_own[kk]);
    }
    if constexpr (kSplitD > 1) {
      // The kSplitD warps of row group wr exchange their Pᵀ/dSᵀ column slices (barrier 1 + wr).
      asm volatile("bar.sync %0, %1;\n" ::"r"(1 + wr), "r"(32 * kSplitD) : "memory");
    }

    // dV += Pᵀ dO and dK += dSᵀ Q over this warp's column slice.
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk) {
      uint32_t ap[4], ads[4];
      if constexpr (kSplitD == 1) {
#pragma unroll
        for (int i = 0; i < 4; ++i) ap[i] = ap_own[kk][i], ads[i] = ads_own[kk][i];
      } else {
        ptx::warp_ldmatrix_x4(ap, s_base + kOffP + swz<kBlockM>(wr * 16 + a_row, kk * 16 + a_col));
        ptx::warp_ldmatrix_x4(ads, sDS + swz<kBlockM>(wr * 16 + a_row, kk * 16 + a_col));
      }
#pragma unroll
      for (int n2 = 0; n2 < kSliceD / 16; ++n2) {
        const int col = wd * kSliceD + n2 * 16 + bt_col;
        uint32_t bd[4], bq[4];
        ptx::warp_ldmatrix_x4_trans(bd, sDO + swz<kHeadDim>(kk * 16 + bt_row, col));
        ptx::warp_ldmatrix_x4_trans(bq, sQ + swz<kHeadDim>(kk * 16 + bt_row, col));
        ptx::warp_mma_m16n8k16<kIsBf16>(acc_dv[2 * n2], ap, {bd[0], bd[1]});
        ptx::warp_mma_m16n8k16<kIsBf16>(acc_dv[2 * n2 + 1], ap, {bd[2], bd[3]});
        ptx::warp_mma_m16n8k16<kIsBf16>(acc_dk[2 * n2], ads, {bq[0], bq[1]});
        ptx::warp_mma_m16n8k16<kIsBf16>(acc_dk[2 * n2 + 1], ads, {bq[2], bq[3]});
      }
    }

    // Deterministic mode: dQ of (h, qb) is accumulated in ascending kv-block order. The kv
    // blocks that visit qb are contiguous from key_begin(q0) / kBlockN; wait for those below.
    int* lock = nullptr;
    if (p.locks != nullptr) {
      lock = p.locks + (int64_t(b) * p.heads_q + h) * p.num_q_blocks + qb;
      if (tid == 0) {
        const int expected = kv_block - int(mask.key_begin(q0, sq, sk) / kBlockN);
        while (ptx::ld_acquire_gpu(lock) < expected) {
        }
      }
    }
    __syncthreads();  // dSᵀ staged; all reads of this stage's Q and dO are done

    // dQ[q0 .., :] += dS K: [kBlockM, kHeadDim] over k = kv rows, fp32 atomics.
    {
      float acc_dq[2][kDqTileN / 8][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int i = 0; i < kDqTileN / 8; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc_dq[mi][i][e] = 0.f;
#pragma unroll
      for (int ks = 0; ks < kBlockN / 16; ++ks) {
        uint32_t a[2][4];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
          ptx::warp_ldmatrix_x4_trans(a[mi], sDS + swz<kBlockM>(ks * 16 + at_row, dq_wm * 32 + mi * 16 + at_col));
#pragma unroll
        for (int n2 = 0; n2 < kDqTileN / 16; ++n2) {
          uint32_t bk[4];
          ptx::warp_ldmatrix_x4_trans(bk, sK + swz<kHeadDim>(ks * 16 + bt_row, dq_wn * kDqTileN + n2 * 16 + bt_col));
#pragma unroll
          for (int mi = 0; mi < 2; ++mi) {
            ptx::warp_mma_m16n8k16<kIsBf16>(acc_dq[mi][2 * n2], a[mi], {bk[0], bk[1]});
            ptx::warp_mma_m16n8k16<kIsBf16>(acc_dq[mi][2 * n2 + 1], a[mi], {bk[2], bk[3]});
          }
        }
      }
      const int64_t row_base = p.cu_seqlens_q != nullptr ? seq.q_start : int64_t(b) * p.seqlen_q;
      float* dq = p.dq_accum + (int64_t(h) * p.rows_q + row_base) * p.head_dim;
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int nt = 0; nt < kDqTileN / 8; ++nt) {
          const int col = dq_wn * kDqTileN + nt * 8 + 2 * t4;
          const int r = q0 + dq_wm * 32 + mi * 16 + g;
          if (col < p.head_dim) {
            if (r < sq) ptx::red_add_f32x2(dq + int64_t(r) * p.head_dim + col, acc_dq[mi][nt][0], acc_dq[mi][nt][1]);
            if (r + 8 < sq)
              ptx::red_add_f32x2(dq + int64_t(r + 8) * p.head_dim + col, acc_dq[mi][nt][2], acc_dq[mi][nt][3]);
          }
        }
    }
    if (lock != nullptr) {
      __threadfence();
      __syncthreads();
      if (tid == 0) ptx::red_release_add_gpu(lock, 1);
    }
  }

  // Epilogue: dK = scale · Σ dSᵀ Q, dV = Σ Pᵀ dO, rounded to the storage type.
  T* dk = static_cast<T*>(p.dk) + b * p.dk_batch_stride + (seq.k_start + kv0) * p.dk_row_stride +
          hk * p.dk_head_stride;
  T* dv = static_cast<T*>(p.dv) + b * p.dv_batch_stride + (seq.k_start + kv0) * p.dv_row_stride +
          hk * p.dv_head_stride;
#pragma unroll
  for (int nt = 0; nt < kSliceD / 8; ++nt) {
    const int col = wd * kSliceD + nt * 8 + 2 * t4;
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int r = wr * 16 + g + hi * 8;
      if (r >= kv_rows) continue;
      if (col < p.head_dim)
        *reinterpret_cast<uint32_t*>(dk + r * p.dk_row_stride + col) =
            pack2<kIsBf16>(acc_dk[nt][2 * hi] * p.scale, acc_dk[nt][2 * hi + 1] * p.scale);
      if (col < p.head_dim_v)
        *reinterpret_cast<uint32_t*>(dv + r * p.dv_row_stride + col) =
            pack2<kIsBf16>(acc_dv[nt][2 * hi], acc_dv[nt][2 * hi + 1]);
    }
  }
}

}  // namespace fa::cuda::sm80
