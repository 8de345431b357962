// CUDA backend, sm80/: the backward main kernel (FlashAttention-2 design, mma.sync m16n8k16).
// One CTA per (kv block, kv head, batch): K/V stationary in shared memory, dK/dV in registers,
// Q blocks (and the group's query heads) inner; dQ leaves through fp32 atomics. Host-free.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/common/convert.cuh"
#include "cuda/common/softmax.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/math.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/ptx/red.cuh"
#include "cuda/sm80/bwd_config.h"
#include "cuda/sm80/bwd_params.h"
#include "cuda/sm80/dq_tile.h"

namespace fa::cuda::sm80 {

// Per q step the 8 warps compute S = Q Kᵀ and dP = dO Vᵀ on one warp grid, turn them into P and
// dS = P ∘ (dP − D) in registers and stage both (16-bit) in shared memory; after one CTA barrier
// they compute dV += Pᵀ dO, dQ = dS K and dK += dSᵀ Q on two more grids (dK/dV stay in
// registers); the fp32 dQ tile is added to the workspace with vector atomics. Every GEMM reads
// both operands from swizzled shared tiles with ldmatrix (transposed where the stored tile is
// [k][m] or [k][n]); each warp's tile is at least 16 x 32, so one fragment feeds several mma.
// With 8 warps a SM the kernel is latency-bound, so work with no mma of its own runs between
// the k-steps of a GEMM: the exponentials of P inside dP's, the dQ atomics inside dK's
// (docs/PERF.md, sm80 backward: each step, its prediction and its outcome).
// kDeterministic: dQ is added in a fixed order (descending kv block per q block, with the
// counters of p.locks), the other instantiation never reads p.locks. kCompact: the tiles of
// BwdConfig<D, true>, for devices with less shared memory.
template <int kHeadDim_, bool kIsBf16_, bool kDeterministic_ = false, bool kCompact_ = false>
struct BwdKernel {
  using Params = BwdParams;
  static constexpr bool kDeterministic = kDeterministic_;
  using Config = BwdConfig<kHeadDim_, kCompact_>;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kIsBf16 = kIsBf16_;
  using T = typename Storage<kIsBf16>::type;

  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMinBlocks = 1;
  static constexpr int kBlockN = Config::kBlockN;  // kv rows per CTA
  static constexpr int kBlockM = Config::kBlockM;  // q rows per inner step
  // Warp tiles: S/dP kSdpM (q) x kSdpN (kv); dK/dV kDkvM (kv) x kDkvN (d); dQ kDqM (q) x kDqN (d).
  static constexpr int kSdpWarpsM = Config::kSdpWarpsM, kDkvWarpsN = Config::kDkvWarpsN,
                       kDqWarpsM = Config::kDqWarpsM;
  static constexpr int kQStages = Config::kQStages;  // Q/dO/LSE/D buffers
  static_assert(kQStages == 1 || kQStages == 2, "one or two Q/dO buffers");
  static constexpr int kSdpM = kBlockM / kSdpWarpsM, kSdpN = kBlockN / (kWarps / kSdpWarpsM);
  static constexpr int kDkvM = kBlockN / kDkvWarpsN, kDkvN = kHeadDim / (kWarps / kDkvWarpsN);
  static constexpr int kDqM = kBlockM / kDqWarpsM, kDqN = kHeadDim / (kWarps / kDqWarpsM);
  static_assert(kSdpM % 16 == 0 && kDkvM % 16 == 0 && kDqM % 16 == 0, "whole m16 tiles per warp");
  static_assert(kSdpN % 16 == 0 && kDkvN % 16 == 0 && kDqN % 16 == 0, "whole n16 pairs per warp");
  static_assert(kBlockM >= 64 && kBlockN >= 64 && kHeadDim >= 64, "the swizzle needs 64 columns");
  // Float offset of (r, c) in dQ_accum's tile of one q block (sm80/dq_tile.h: this kernel's dQ
  // warp grid).
  static __device__ __forceinline__ int dq_tile_offset(int r, int c) {
    return DqTile{kBlockM, kHeadDim, kDqWarpsM}.offset(r, c);
  }

  // Shared memory (bytes): K, V [kBlockN, kHeadDim]; Q, dO [kBlockM, kHeadDim] x kQStages;
  // P, dS [kBlockM, kBlockN]; LSE and D [kBlockM] x kQStages. Rows are 16-byte-chunk swizzled
  // (chunk ^= row % 8), so ldmatrix, the P/dS stores and cp.async are bank-conflict free.
  static constexpr int kTileKV = kBlockN * kHeadDim * 2;
  static constexpr int kTileQ = kBlockM * kHeadDim * 2;
  static constexpr int kTileP = kBlockM * kBlockN * 2;
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + kTileKV;
  static constexpr int kOffQ = kOffV + kTileKV;
  static constexpr int kOffDO = kOffQ + kQStages * kTileQ;
  static constexpr int kOffP = kOffDO + kQStages * kTileQ;
  static constexpr int kOffDS = kOffP + kTileP;
  static constexpr int kOffLse = kOffDS + kTileP;
  static constexpr int kOffDsum = kOffLse + kQStages * kBlockM * 4;
  static constexpr int kSmemBytes = kOffDsum + kQStages * kBlockM * 4;

  static dim3 block() { return dim3(kThreads); }
  static constexpr int smem_bytes() { return kSmemBytes; }
  static int64_t num_kv_blocks(int64_t seqlen_k) { return (seqlen_k + kBlockN - 1) / kBlockN; }
  static int64_t num_q_blocks(int64_t seqlen_q) { return (seqlen_q + kBlockM - 1) / kBlockM; }
  // One CTA per (kv block, kv head, batch), kv block fastest: ascending kv blocks are the
  // longest under a causal mask. The deterministic kernel launches them in descending order and
  // adds dQ in that order, so a CTA waits only on CTAs launched before it, and under a causal
  // mask a kv block's first q block (its diagonal) has no kv block above it to wait for.
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
    if (p.dq_accum_layout != DqAccumLayout::kTiled || p.dq_tile_rows != kBlockM || p.dq_tile_warps_m != kDqWarpsM ||
        p.dq_accum_pitch != kHeadDim)
      return "needs dQ_accum in its tiles of " + std::to_string(kBlockM) + " x " + std::to_string(kHeadDim);
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
  // Each thread copies one 16-byte column chunk in rows r0, r0 + kPass, ...: one pointer
  // step per copy, and the same swizzle (kPass is a multiple of 8).
  template <int kRows>
  static __device__ __forceinline__ void cta_load_tile(uint32_t dst, const T* src, int64_t row_stride,
                                                       int rows, int cols, const T* safe) {
    constexpr int kChunksPerRow = kHeadDim / 8;
    constexpr int kPass = kThreads / kChunksPerRow;
    static_assert(kThreads % kChunksPerRow == 0 && kRows % kPass == 0 && kPass % 8 == 0, "whole passes");
    const int r0 = threadIdx.x / kChunksPerRow, col = (threadIdx.x % kChunksPerRow) * 8;
    const T* s = src + r0 * row_stride + col;
    dst += swz<kHeadDim>(r0, col);
    const bool col_ok = col < cols;
#pragma unroll
    for (int i = 0; i < kRows / kPass; ++i) {
      const bool ok = col_ok && r0 + i * kPass < rows;
      ptx::cp_async_16(dst + i * kPass * kHeadDim * 2, ok ? s : safe, ok);
      s += kPass * row_stride;
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

  // ldmatrix addressing. A warp reads 16 x 16 blocks of a swizzled tile; lane l addresses one
  // 16-byte row chunk: row lr, chunk lc of the block, lr = l % 8 + 8·((l / 8) % 2), lc = l / 16
  // (pattern 0: A stored [m][k], B stored [k][n]), or lr = l % 8 + 8·(l / 16), lc = (l / 8) % 2
  // (pattern 1: A stored [k][m], B stored [n][k]). frag_addr() computes a lane's address of the
  // warp tile's first block (row0, col0) once; the block at +rows, +chunks is then
  // (addr ^ ((chunks % 8) << 4)) + ((chunks & ~7) << 4) + rows·kCols·2: one XOR, the rest folds
  // into the instruction's offset. That holds because the swizzle XORs a row's chunk index
  // with row % 8 (unchanged by whole 16-row steps), and the chunk offsets of a warp tile
  // (col0 / 8), of its blocks and of the lane (lc) have disjoint bits: warp tiles are powers of
  // two at multiples of their size, and blocks step by two chunks from lc < 2.
  template <int kCols, int kPattern>
  static __device__ __forceinline__ uint32_t frag_addr(uint32_t tile, int row0, int col0) {
    const int lane = threadIdx.x & 31;
    const int lr = kPattern == 0 ? (lane & 7) + ((lane >> 3) & 1) * 8 : (lane & 7) + (lane >> 4) * 8;
    const int lc = kPattern == 0 ? lane >> 4 : (lane >> 3) & 1;
    return tile + swz<kCols>(row0 + lr, col0 + lc * 8);
  }
  template <int kCols>
  static __device__ __forceinline__ uint32_t block_addr(uint32_t addr, int rows, int chunks) {
    return (addr ^ uint32_t((chunks & 7) << 4)) + uint32_t((chunks & ~7) << 4) + uint32_t(rows * kCols * 2);
  }

  // One warp: acc[kM/16][kN/8] += A · B over k in [0, kK), both operands read by ldmatrix
  // from swizzled shared tiles. a: frag_addr of A's warp tile, stored [m][k] (kATrans false,
  // pattern 0) or [k][m] (pattern 1), kACols columns; b likewise for B, stored [n][k]
  // (kBTrans false, pattern 1) or [k][n] (pattern 0). k starts at stored row or column 0.
  // after_k(ks), if given, runs after k-step ks (work to interleave with the mma).
  struct Nothing {
    __device__ void operator()(int) const {}
  };
  template <int kM, int kN, int kK, int kACols, bool kATrans, int kBCols, bool kBTrans, class After = Nothing>
  static __device__ __forceinline__ void warp_gemm(float (&acc)[kM / 16][kN / 8][4], uint32_t a, uint32_t b,
                                                   After after_k = {}) {
    static_assert((kM & (kM - 1)) == 0 && (kN & (kN - 1)) == 0, "power-of-two warp tiles (frag_addr)");
#pragma unroll
    for (int ks = 0; ks < kK / 16; ++ks) {
      uint32_t af[kM / 16][4];
#pragma unroll
      for (int mi = 0; mi < kM / 16; ++mi) {
        if constexpr (kATrans)
          ptx::warp_ldmatrix_x4_trans(af[mi], block_addr<kACols>(a, ks * 16, mi * 2));
        else
          ptx::warp_ldmatrix_x4(af[mi], block_addr<kACols>(a, mi * 16, ks * 2));
      }
#pragma unroll
      for (int n2 = 0; n2 < kN / 16; ++n2) {
        uint32_t bf[4];
        if constexpr (kBTrans)
          ptx::warp_ldmatrix_x4_trans(bf, block_addr<kBCols>(b, ks * 16, n2 * 2));
        else
          ptx::warp_ldmatrix_x4(bf, block_addr<kBCols>(b, n2 * 16, ks * 2));
#pragma unroll
        for (int mi = 0; mi < kM / 16; ++mi) {
          ptx::warp_mma_m16n8k16<kIsBf16>(acc[mi][2 * n2], af[mi], {bf[0], bf[1]});
          ptx::warp_mma_m16n8k16<kIsBf16>(acc[mi][2 * n2 + 1], af[mi], {bf[2], bf[3]});
        }
      }
      after_k(ks);
    }
  }

  __device__ void operator()(const BwdParams& p, char* smem) const;
};

template <int kHeadDim, bool kIsBf16, bool kDet, bool kCompact>
__device__ void BwdKernel<kHeadDim, kIsBf16, kDet, kCompact>::operator()(const BwdParams& p, char* smem) const {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;  // mma fragment row group / column pair
  const int kv_slot = int(blockIdx.x % p.num_kv_blocks);
  const int kv_block = kDeterministic ? p.num_kv_blocks - 1 - kv_slot : kv_slot;
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
  const uint32_t sK = s_base + kOffK, sV = s_base + kOffV, sP = s_base + kOffP, sDS = s_base + kOffDS;
  const float* sLse = reinterpret_cast<const float*>(smem + kOffLse);
  const float* sDsum = reinterpret_cast<const float*>(smem + kOffDsum);

  const T* q_all = static_cast<const T*>(p.q);
  const T* do_all = static_cast<const T*>(p.dout);
  const T* k_ptr = static_cast<const T*>(p.k) + b * p.k_batch_stride +
                   (seq.k_start + kv0) * p.k_row_stride + hk * p.k_head_stride;
  const T* v_ptr = static_cast<const T*>(p.v) + b * p.v_batch_stride +
                   (seq.k_start + kv0) * p.v_row_stride + hk * p.v_head_stride;

  // Issues the loads of the step (query head h, q block qb) into `stage`.
  auto load_step = [&](int h, int qb, int stage) {
    const int q0 = qb * kBlockM;
    const int rows = min(kBlockM, sq - q0);
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
  if (steps > 0) load_step(hk * p.group, qb_first, 0);
  ptx::cp_async_commit();

  // This warp's place in the three warp grids.
  const int sdp_m = (warp % kSdpWarpsM) * kSdpM, sdp_n = (warp / kSdpWarpsM) * kSdpN;
  const int dkv_m = (warp % kDkvWarpsN) * kDkvM, dkv_n = (warp / kDkvWarpsN) * kDkvN;
  const int dq_m = (warp % kDqWarpsM) * kDqM, dq_n = (warp / kDqWarpsM) * kDqN;
  // Lane addresses of the warp tiles (stage 0; Q and dO share one, as do K and V, P and dS).
  const uint32_t a_sdp = frag_addr<kHeadDim, 0>(s_base + kOffQ, sdp_m, 0);
  const uint32_t b_sdp = frag_addr<kHeadDim, 1>(sK, sdp_n, 0);
  const uint32_t a_dkv = frag_addr<kBlockN, 1>(sP, 0, dkv_m);
  const uint32_t b_dkv = frag_addr<kHeadDim, 0>(s_base + kOffQ, 0, dkv_n);
  const uint32_t a_dq = frag_addr<kBlockN, 0>(sDS, dq_m, 0);
  const uint32_t b_dq = frag_addr<kHeadDim, 0>(sK, 0, dq_n);
  // This lane's first P/dS pair (row sdp_m + g, column sdp_n + 2·t4); block_addr steps it by
  // whole 8-row groups and 8-column chunks (chunk bits disjoint from sdp_n's, as above).
  const uint32_t st_pds = sP + swz<kBlockN>(sdp_m + g, sdp_n) + t4 * 4;
  // First row of this sequence's dQ_accum tiles in a head's rows (BwdParams::dq_accum_layout).
  const int64_t dq_row0 = (p.cu_seqlens_q != nullptr ? seq.q_start : int64_t(b) * p.seqlen_q) + int64_t(b) * kBlockM;
  float acc_dk[kDkvM / 16][kDkvN / 8][4], acc_dv[kDkvM / 16][kDkvN / 8][4];
  zero_acc(acc_dk);
  zero_acc(acc_dv);

  // Steps: (query head h, q block qb), q block fastest.
  for (int s = 0, h = hk * p.group, qb = qb_first; s < steps; ++s) {
    const int stage = kQStages == 2 ? s & 1 : 0;
    const int q0 = qb * kBlockM;
    ptx::cp_async_wait<0>();
    __syncthreads();  // stage `stage` landed for all; every warp is done with step s-1
    const bool last_qb = qb + 1 == qb_end;
    const int h_next = last_qb ? h + 1 : h, qb_next = last_qb ? qb_first : qb + 1;
    if constexpr (kQStages == 2) {
      if (s + 1 < steps) load_step(h_next, qb_next, stage ^ 1);  // into the stage step s-1 read
      ptx::cp_async_commit();
    }

    const uint32_t q_stage = stage * kTileQ;  // a multiple of 128 bytes: frag_addr offsets add

    // S = Q Kᵀ and dP = dO Vᵀ for this warp's q rows sdp_m.. and kv columns sdp_n.., then
    // P = exp2(S'·log2e − LSE·log2e), S' = scale·S or c·tanh(scale·S / c), and dP − D (times
    // 1 − tanh² under softcap) in acc_dp. Without softcap, P is computed between dP's k-steps.
    float acc_s[kSdpM / 16][kSdpN / 8][4], acc_dp[kSdpM / 16][kSdpN / 8][4];
    zero_acc(acc_s);
    zero_acc(acc_dp);
    float l2[kSdpM / 16][2], dsum[kSdpM / 16][2];  // this lane's rows: LSE·log2e and D
#pragma unroll
    for (int mi = 0; mi < kSdpM / 16; ++mi) {
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const int row = stage * kBlockM + sdp_m + mi * 16 + g + hi * 8;
        const float l = sLse[row];
        // A row with no visible key has LSE = −inf: use +inf so that P = 0, never NaN.
        l2[mi][hi] = l == -INFINITY ? INFINITY : l * 1.4426950408889634f;
        dsum[mi][hi] = sDsum[row];
      }
    }
    warp_gemm<kSdpM, kSdpN, kHeadDim, kHeadDim, false, kHeadDim, false>(acc_s, a_sdp + q_stage, b_sdp);
    const uint32_t a_dp = a_sdp + q_stage + (kOffDO - kOffQ), b_dp = b_sdp + (kOffV - kOffK);
    constexpr int kElems = kSdpM / 16 * (kSdpN / 8) * 4, kSdpSteps = kHeadDim / 16;
    if (p.softcap > 0.f) {
      warp_gemm<kSdpM, kSdpN, kHeadDim, kHeadDim, false, kHeadDim, false>(acc_dp, a_dp, b_dp);
#pragma unroll
      for (int i = 0; i < kElems; ++i) {
        const int mi = i / (kElems / (kSdpM / 16)), ni = i / 4 % (kSdpN / 8), e = i % 4;
        const float th = softcap_tanh(acc_s[mi][ni][e] * p.softcap_in);
        acc_s[mi][ni][e] = ptx::ex2_approx(th * p.score_log2 - l2[mi][e >> 1]);
        acc_dp[mi][ni][e] = (acc_dp[mi][ni][e] - dsum[mi][e >> 1]) * (1.f - th * th);
      }
    } else {
      auto p_slice = [&](int ks) {  // element i after k-step i·kSdpSteps / kElems
#pragma unroll
        for (int i = 0; i < kElems; ++i) {
          if (i * kSdpSteps / kElems != ks) continue;
          const int mi = i / (kElems / (kSdpM / 16)), ni = i / 4 % (kSdpN / 8), e = i % 4;
          acc_s[mi][ni][e] = ptx::ex2_approx(acc_s[mi][ni][e] * p.score_log2 - l2[mi][e >> 1]);
        }
      };
      warp_gemm<kSdpM, kSdpN, kHeadDim, kHeadDim, false, kHeadDim, false>(acc_dp, a_dp, b_dp, p_slice);
#pragma unroll
      for (int i = 0; i < kElems; ++i) {
        const int mi = i / (kElems / (kSdpM / 16)), ni = i / 4 % (kSdpN / 8), e = i % 4;
        acc_dp[mi][ni][e] -= dsum[mi][e >> 1];
      }
    }

    // Masked and padded entries get P = 0; only tiles that the mask or a sequence end cuts.
    const bool full = q0 + kBlockM <= sq && kv_rows == kBlockN &&
                      mask.key_begin(q0 + kBlockM - 1, sq, sk) <= kv0 &&
                      mask.key_end(q0, sq, sk) >= kv0 + kBlockN;
    if (!full) {
#pragma unroll
      for (int mi = 0; mi < kSdpM / 16; ++mi) {
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
          // Visible columns [c_lo, c_hi) of this q row, relative to kv0 (none past sq).
          const int r = q0 + sdp_m + mi * 16 + g + hi * 8;
          const int64_t lo = mask.key_begin(r, sq, sk) - kv0, up = mask.key_end(r, sq, sk) - kv0;
          const int c_lo = int(lo < 0 ? 0 : (lo > kBlockN ? kBlockN : lo));
          const int c_hi = r < sq ? int(up < 0 ? 0 : (up > kBlockN ? kBlockN : up)) : 0;
#pragma unroll
          for (int ni = 0; ni < kSdpN / 8; ++ni) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int c = sdp_n + ni * 8 + 2 * t4 + e;
              if (c < c_lo || c >= c_hi) acc_s[mi][ni][2 * hi + e] = 0.f;
            }
          }
        }
      }
    }

    // Stage P and dS = P ∘ (dP − D)(·chain) [q][kv] as 16-bit pairs: one writer per element.
#pragma unroll
    for (int mi = 0; mi < kSdpM / 16; ++mi) {
#pragma unroll
      for (int ni = 0; ni < kSdpN / 8; ++ni) {
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
          const uint32_t at = block_addr<kBlockN>(st_pds, mi * 16 + hi * 8, ni);
          const float p0 = acc_s[mi][ni][2 * hi], p1 = acc_s[mi][ni][2 * hi + 1];
          const uint32_t pv = pack2<kIsBf16>(p0, p1);
          const uint32_t dsv = pack2<kIsBf16>(p0 * acc_dp[mi][ni][2 * hi], p1 * acc_dp[mi][ni][2 * hi + 1]);
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(pv));
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at + (kOffDS - kOffP)), "r"(dsv));
        }
      }
    }

    // Deterministic: dQ of (h, qb) is accumulated in descending kv-block order. The kv blocks
    // that visit qb are contiguous up to the one holding the last key that qb's last row sees
    // (key_end is monotone, and that row's window is not empty when it sees any key); wait for
    // those above this one.
    int* lock = nullptr;
    if constexpr (kDeterministic) {
      lock = p.locks + (int64_t(b) * p.heads_q + h) * p.num_q_blocks + qb;
      if (tid == 0) {
        const int64_t key_end = mask.key_end(min(q0 + kBlockM, sq) - 1, sq, sk);
        const int expected = int((key_end + kBlockN - 1) / kBlockN) - 1 - kv_block;
        while (ptx::ld_acquire_gpu(lock) < expected) {
        }
      }
    }
    __syncthreads();  // P and dS staged

    // dV += Pᵀ dO over this warp's kv rows dkv_m.. and columns dkv_n.. ...
    warp_gemm<kDkvM, kDkvN, kBlockM, kBlockN, true, kHeadDim, true>(acc_dv, a_dkv, b_dkv + q_stage + (kOffDO - kOffQ));
    // dQ[q0 + dq_m .., dq_n ..] += dS K over the block's kv rows, fp32 atomics issued between the
    // k-steps of dK += dSᵀ Q, so that they drain under its mma.
    float acc_dq[kDqM / 16][kDqN / 8][4];
    zero_acc(acc_dq);
    warp_gemm<kDqM, kDqN, kBlockN, kBlockN, false, kHeadDim, true>(acc_dq, a_dq, b_dq);
    // This lane's pair i of the q block's dQ_accum tile is at dq + 64·i. The whole tile is there
    // (rows past the sequence and columns past head_dim add zeros).
    float* const dq = p.dq_accum + (int64_t(h) * p.dq_accum_rows + dq_row0 + q0) * kHeadDim +
                      dq_tile_offset(dq_m + g, dq_n + 2 * t4);
    constexpr int kReds = kDqM / 16 * 2 * (kDqN / 8), kSteps = kBlockM / 16;  // pairs; dK's k-steps
    auto red_slice = [&](int ks) {
#pragma unroll
      for (int i = 0; i < kReds; ++i) {
        if (i * kSteps / kReds != ks) continue;  // pair i goes out after k-step i·kSteps / kReds
        const int mi = i / (2 * (kDqN / 8)), hi = i / (kDqN / 8) % 2, nt = i % (kDqN / 8);
        // q0 < sq always holds; in the predicated form ptxas keeps the adds where they are issued
        // (unpredicated, it gathers them and spills: 164 bytes at hdim 256, docs/PERF.md).
        ptx::red_add_f32x2_if(q0 < sq, dq + 64 * i, acc_dq[mi][nt][2 * hi], acc_dq[mi][nt][2 * hi + 1]);
      }
    };
    warp_gemm<kDkvM, kDkvN, kBlockM, kBlockN, true, kHeadDim, true>(acc_dk, a_dkv + (kOffDS - kOffP), b_dkv + q_stage,
                                                                     red_slice);
    if constexpr (kDeterministic || kQStages == 1) {
      if constexpr (kDeterministic) __threadfence();
      __syncthreads();  // every warp's dQ added (deterministic) and Q/dO read (one buffer)
      if constexpr (kDeterministic) {
        if (tid == 0) ptx::red_release_add_gpu(lock, 1);
      }
      if constexpr (kQStages == 1) {
        if (s + 1 < steps) load_step(h_next, qb_next, 0);
        ptx::cp_async_commit();
      }
    }
    h = h_next;
    qb = qb_next;
  }
  ptx::cp_async_wait<0>();  // nothing in flight at exit (a CTA with no step)

  // Epilogue: dK = scale · Σ dSᵀ Q, dV = Σ Pᵀ dO, rounded to the storage type.
  T* dk = static_cast<T*>(p.dk) + b * p.dk_batch_stride + (seq.k_start + kv0) * p.dk_row_stride +
          hk * p.dk_head_stride;
  T* dv = static_cast<T*>(p.dv) + b * p.dv_batch_stride + (seq.k_start + kv0) * p.dv_row_stride +
          hk * p.dv_head_stride;
#pragma unroll
  for (int mi = 0; mi < kDkvM / 16; ++mi)
#pragma unroll
    for (int nt = 0; nt < kDkvN / 8; ++nt) {
      const int col = dkv_n + nt * 8 + 2 * t4;
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const int r = dkv_m + mi * 16 + g + hi * 8;
        if (r >= kv_rows) continue;
        if (col < p.head_dim)
          *reinterpret_cast<uint32_t*>(dk + r * p.dk_row_stride + col) =
              pack2<kIsBf16>(acc_dk[mi][nt][2 * hi] * p.scale, acc_dk[mi][nt][2 * hi + 1] * p.scale);
        if (col < p.head_dim_v)
          *reinterpret_cast<uint32_t*>(dv + r * p.dv_row_stride + col) =
              pack2<kIsBf16>(acc_dv[mi][nt][2 * hi], acc_dv[mi][nt][2 * hi + 1]);
      }
    }
}

}  // namespace fa::cuda::sm80
