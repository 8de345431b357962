// CUDA backend, sm80/: the FlashAttention-2 forward kernel class (mma.sync, ldmatrix, cp.async).
// One CTA per (q-block, head, batch); K/V blocks stream through cp.async: a kStages-deep ring,
// or (kStages = 1) one K and one V buffer, each refilled while the other is in use. Warps own
// their query rows alone (kSplit = 1) or in pairs (kSplit = 2), each of a pair computing half of
// S's keys and half of O's columns, so that every K and V fragment read feeds twice the rows.
// Receives validated FwdParams; does not choose tile sizes (fwd_config.h) or launch (launch/).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "cuda/common/convert.cuh"
#include "cuda/common/mask.cuh"
#include "cuda/common/softmax.cuh"
#include "cuda/common/tile_scheduler.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/named_barrier.cuh"
#include "cuda/sm80/fwd_mainloop.cuh"
#include "cuda/sm80/fwd_params.h"

namespace fa::cuda::sm80 {

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kStages_, int kMinBlocks_,
          int kSplit_, bool kIsBf16_>
struct FwdKernel {
  using Params = FwdParams;
  using T = typename Storage<kIsBf16_>::type;

  static constexpr bool kIsBf16 = kIsBf16_;
  static constexpr int kHeadDim = kHeadDim_;  // compiled D (and Dv); smaller ones zero-fill
  static constexpr int kBlockM = kBlockM_;    // query rows per CTA
  static constexpr int kBlockN = kBlockN_;    // keys per K/V block
  static constexpr int kWarps = kWarps_;
  static constexpr int kStages = kStages_;  // K/V buffers; 1: K_{j+1} loads during P·V_j,
                                            // V_j during Q·K_jᵀ (FlashAttention-2's schedule)
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kSplit = kSplit_;  // warps sharing a set of query rows
  static constexpr int kThreads = 32 * kWarps;

  // Warp w serves rows group = w / kSplit and part = w % kSplit: S for keys [part·kWarpKeys, +
  // kWarpKeys) of each block, O for columns [part·kWarpCols, + kWarpCols).
  static constexpr int kWarpRows = kBlockM / (kWarps / kSplit);
  static constexpr int kWarpKeys = kBlockN / kSplit;
  static constexpr int kWarpCols = kHeadDim / kSplit;
  static constexpr int kMT = kWarpRows / 16;   // m16 tiles per warp
  static constexpr int kNT = kWarpKeys / 8;    // n8 tiles of S per warp
  static constexpr int kOT = kWarpCols / 8;    // n8 tiles of O per warp
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row

  // Shared memory: Q [kBlockM][D], then K [kStages][kBlockN][D], then V [kStages][kBlockN][D],
  // then (kSplit = 2) per warp the words its partner reads: row maxima and sums (kMT·2 a
  // lane), then its packed P fragments (kMT·kNT·2 a lane).
  static constexpr int kQBytes = kBlockM * kRowBytes;
  static constexpr int kKVBytes = kBlockN * kRowBytes;
  static constexpr int kStatWords = kMT * 2;
  static constexpr int kPWords = kMT * kNT * 2;
  static constexpr int kXBytes = kSplit > 1 ? 32 * 4 * (kStatWords + kPWords) : 0;
  static constexpr int kSmemBytes = kQBytes + 2 * kStages * kKVBytes + kWarps * kXBytes;

  static_assert(kWarpRows % 16 == 0 && kWarpKeys % 16 == 0 && kHeadDim % 16 == 0, "mma tiling");
  static_assert(kStages >= 1, "at least one K and one V buffer");
  static_assert(kSplit == 1 || (kSplit == 2 && kWarpCols % 64 == 0 && kStatWords % 4 == 0),
                "pairs exchange 16-byte words; a half of O's columns must keep the XOR swizzle");

  static constexpr int smem_bytes() { return kSmemBytes; }
  static dim3 block() { return dim3(kThreads); }
  static dim3 grid(const Params& p) {
    return dim3(static_cast<unsigned>(
        LongestFirstScheduler::num_tiles(p.num_m_blocks, p.heads_q, p.batch)));
  }
  static int num_m_blocks(int64_t seqlen_q) {
    return static_cast<int>((seqlen_q + kBlockM - 1) / kBlockM);
  }

  // Empty string when this kernel runs p on a device with `smem_optin` bytes per block.
  static std::string can_implement(const Params& p, int smem_optin) {
    if (p.head_dim > kHeadDim || p.head_dim_v > kHeadDim)
      return "head dim above the compiled " + std::to_string(kHeadDim);
    if (p.head_dim % 8 != 0 || p.head_dim_v % 8 != 0) return "head dims must be multiples of 8";
    if (kSmemBytes > smem_optin)
      return "needs " + std::to_string(kSmemBytes) + " bytes of shared memory per block, the device has " +
             std::to_string(smem_optin);
    if (LongestFirstScheduler::num_tiles(p.num_m_blocks, p.heads_q, p.batch) > INT32_MAX)
      return "batch · heads · ceil(seqlen_q / " + std::to_string(kBlockM) + ") exceeds 2^31 - 1 CTAs";
    return {};
  }

  __device__ __forceinline__ void operator()(const Params& p, char* smem) const;
};

template <int D, int BM, int BN, int W, int S, int MB, int X, bool Bf16>
__device__ __forceinline__ void FwdKernel<D, BM, BN, W, S, MB, X, Bf16>::operator()(
    const Params& p, char* smem) const {
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int group = warp / kSplit;  // the warps of a group share their query rows
  const int part = warp % kSplit;
  const FwdTile tile = LongestFirstScheduler::tile(p.num_m_blocks, p.heads_q);

  // This (batch, head)'s sequence pair and first packed row.
  int sq = p.seqlen_q;
  int sk = p.seqlen_k;
  int64_t q_first = 0;
  int64_t k_first = 0;
  if (p.cu_seqlens_q != nullptr) {
    q_first = p.cu_seqlens_q[tile.batch];
    sq = p.cu_seqlens_q[tile.batch + 1] - static_cast<int>(q_first);
    k_first = p.cu_seqlens_k[tile.batch];
    sk = p.cu_seqlens_k[tile.batch + 1] - static_cast<int>(k_first);
  }
  const int m0 = tile.m_block * kBlockM;
  if (m0 >= sq) return;  // uniform over the CTA
  const int head = tile.head;
  const int head_kv = head / p.group;
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int64_t b = tile.batch;

  const T* q = static_cast<const T*>(p.q) + (varlen ? q_first * p.q_row_stride : b * p.q_batch_stride) +
               head * p.q_head_stride + static_cast<int64_t>(m0) * p.q_row_stride;
  const T* k = static_cast<const T*>(p.k) + (varlen ? k_first * p.k_row_stride : b * p.k_batch_stride) +
               head_kv * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + (varlen ? k_first * p.v_row_stride : b * p.v_batch_stride) +
               head_kv * p.v_head_stride;
  T* o = static_cast<T*>(p.o) + (varlen ? q_first * p.o_row_stride : b * p.o_batch_stride) +
         head * p.o_head_stride + static_cast<int64_t>(m0) * p.o_row_stride;

  // Keys this q-block can see: from key_begin of its first row to key_end of its last.
  const int m_last = min(m0 + kBlockM, sq) - 1;
  const int64_t key_lo = p.mask.key_begin(m0, sq, sk);
  const int64_t key_hi = p.mask.key_end(m_last, sq, sk);
  const int nb_begin = static_cast<int>(key_lo / kBlockN);
  const int n_blocks = key_hi > key_lo ? static_cast<int>((key_hi + kBlockN - 1) / kBlockN) - nb_begin : 0;
  // A block [n0, n0 + kBlockN) needs no element mask iff every row of the q-block sees all of it.
  const int full_lo = static_cast<int>(p.mask.key_begin(m_last, sq, sk) < sk ? p.mask.key_begin(m_last, sq, sk) : sk);  // latest first key
  const int full_hi = static_cast<int>(p.mask.key_end(m0, sq, sk));                          // earliest end

  const uint32_t smem_q = ptx::smem_u32(smem);
  const uint32_t smem_k = smem_q + kQBytes;
  const uint32_t smem_v = smem_k + kStages * kKVBytes;
  // This warp's exchange words and its partner's (kSplit = 2; unused otherwise).
  const uint32_t x_own = smem_v + kStages * kKVBytes + warp * kXBytes;
  const uint32_t x_peer = smem_v + kStages * kKVBytes + (warp ^ 1) * kXBytes;
  const int pair_barrier = 1 + group;  // named barrier id (0 is __syncthreads)
  // A pair's per-row statistics: v becomes op(v, partner's v) in both warps (op commutative, so
  // both get the same bits).
  auto pair_join = [&](float (&v)[kMT][2], auto op) {
    uint32_t w[kMT][2];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) w[mt][0] = __float_as_uint(v[mt][0]), w[mt][1] = __float_as_uint(v[mt][1]);
    warp_stash(x_own, w);
    ptx::named_barrier_sync(pair_barrier, 64);
    warp_fetch(x_peer, w);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) v[mt][h] = op(v[mt][h], __uint_as_float(w[mt][h]));
  };

  const TileLoader<T, kHeadDim, kBlockM, kThreads> q_loader(tid);
  const TileLoader<T, kHeadDim, kBlockN, kThreads> kv_loader(tid);
  auto cta_load_k = [&](int block, int stage) {
    const int n0 = (nb_begin + block) * kBlockN;
    kv_loader.cta_load(smem_k + stage * kKVBytes, k + static_cast<int64_t>(n0) * p.k_row_stride,
                       p.k_row_stride, sk - n0, p.head_dim);
    ptx::cp_async_commit();
  };
  auto cta_load_v = [&](int block, int stage) {
    const int n0 = (nb_begin + block) * kBlockN;
    kv_loader.cta_load(smem_v + stage * kKVBytes, v + static_cast<int64_t>(n0) * p.v_row_stride,
                       p.v_row_stride, sk - n0, p.head_dim_v);
    ptx::cp_async_commit();
  };

  // Prologue: Q, then the first kStages - 1 K/V blocks (groups: Q, K0, V0, K1, V1, ...); with
  // one buffer each, Q, K0 and V0 (both buffers are free: V0 loads under Q·K0ᵀ's wait).
  q_loader.cta_load(smem_q, q, p.q_row_stride, sq - m0, p.head_dim);
  ptx::cp_async_commit();
  if constexpr (kStages == 1) {
    if (n_blocks > 0) {
      cta_load_k(0, 0);
      cta_load_v(0, 0);
    }
  }
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < n_blocks) {
      cta_load_k(st, st);
      cta_load_v(st, st);
    } else {
      ptx::cp_async_commit();
      ptx::cp_async_commit();
    }
  }

  // Column offsets of a half (multiples of 8 chunks) commute with the XOR swizzle.
  const uint32_t col_bytes = part * kWarpCols * 2;
  const LaneAddr<kHeadDim> q_addr = lane_addr_a<kHeadDim>(smem_q, group * kWarpRows, lane);
  const LaneAddr<kHeadDim> k_addr = lane_addr_bt<kHeadDim>(smem_k + part * kWarpKeys * kRowBytes, lane);
  // V rows of this warp's keys and of its partner's, this warp's columns.
  const LaneAddr<kHeadDim> v_addr = lane_addr_b<kHeadDim>(smem_v + part * kWarpKeys * kRowBytes + col_bytes, lane);
  const LaneAddr<kHeadDim> v_peer_addr =
      lane_addr_b<kHeadDim>(smem_v + (part ^ 1) * kWarpKeys * kRowBytes + col_bytes, lane);
  const int g = lane / 4;
  const int t = lane % 4;
  const int warp_row0 = m0 + group * kWarpRows + g;  // sequence row of c0/c1 in m-tile 0

  float acc_o[kMT][kOT][4];
  zero_acc(acc_o);
  OnlineSoftmax<kMT> softmax;
  softmax.init();
  if constexpr (kStages == 1) {
    ptx::cp_async_wait<1>();
    __syncthreads();
  }

  for (int it = 0; it < n_blocks; ++it) {
    const int stage = it % kStages;
    if constexpr (kStages == 1) {
      // K_it landed; after the barrier every warp is done with V_{it-1}: refill V. (Block 0:
      // before the loop, Q and K0 landed while V0 may still be in flight.)
      if (it > 0) {
        ptx::cp_async_wait<0>();
        __syncthreads();
        cta_load_v(it, 0);
      }
    } else {
      // K_it (and Q) landed for this thread; the barrier publishes them to all and frees the
      // stage that block it - 1 used.
      ptx::cp_async_wait<2 * kStages - 3>();
      __syncthreads();
      if (it + kStages - 1 < n_blocks) {
        cta_load_k(it + kStages - 1, (it + kStages - 1) % kStages);
        cta_load_v(it + kStages - 1, (it + kStages - 1) % kStages);
      } else {
        ptx::cp_async_commit();
        ptx::cp_async_commit();
      }
    }

    // S = Q·K_itᵀ
    float s[kMT][kNT][4];
    LaneAddr<kHeadDim> kb = k_addr;
    kb.base += stage * kKVBytes;
    warp_gemm_qk<kIsBf16, kHeadDim, kMT, kNT>(s, q_addr, kb);

    // S = softcap·tanh(scale·S / softcap) when a softcap is set (uniform branch).
    if (p.softcap > 0.f) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = p.softcap * softcap_tanh(s[mt][nt][e] * p.softcap_in);
    }
    const int n0 = (nb_begin + it) * kBlockN;
    if (!(n0 + kBlockN <= sk && full_lo <= n0 && full_hi >= n0 + kBlockN)) {
      warp_mask_tile<kMT, kNT>(s, p.mask, warp_row0, n0 + part * kWarpKeys + 2 * t, sq, sk);
    }
    // m, l, P = exp2(S·score_log2 − m·score_log2), O rescaled; a pair agrees on m first.
    if constexpr (kSplit == 1) {
      softmax.step(s, acc_o, p.score_log2);
    } else {
      softmax.step_joint(s, acc_o, p.score_log2,
                         [&](float (&m)[kMT][2]) { pair_join(m, [](float a, float b) { return fmaxf(a, b); }); });
    }
    uint32_t p_frag[kMT][kNT / 2][4];
    warp_pack_p<kIsBf16, kMT, kNT>(p_frag, s);
    // The partner reads these after the barrier below.
    if constexpr (kSplit > 1) warp_stash(x_own + 128 * kStatWords, p_frag);

    if constexpr (kStages == 1) {
      // V_it landed; after the barrier every warp is done with K_it: refill K.
      ptx::cp_async_wait<0>();
      __syncthreads();
      if (it + 1 < n_blocks) cta_load_k(it + 1, 0);
    } else {
      // V_it landed; publish it.
      ptx::cp_async_wait<2 * kStages - 2>();
      __syncthreads();
    }
    // O += P·V_it (a pair: this warp's keys, then its partner's)
    LaneAddr<kHeadDim> vb = v_addr;
    vb.base += stage * kKVBytes;
    warp_gemm_pv<kIsBf16, kHeadDim, kMT, kNT / 2, kOT>(acc_o, p_frag, vb);
    if constexpr (kSplit > 1) {
      warp_fetch(x_peer + 128 * kStatWords, p_frag);
      vb = v_peer_addr;
      vb.base += stage * kKVBytes;
      warp_gemm_pv<kIsBf16, kHeadDim, kMT, kNT / 2, kOT>(acc_o, p_frag, vb);
    }
  }
  ptx::cp_async_wait_all();
  __syncthreads();  // with no key block, other threads' Q copies may still target our rows

  // A pair's row sums: each warp's l covers its own keys.
  if constexpr (kSplit > 1) pair_join(softmax.row_sum, [](float a, float b) { return a + b; });

  // Epilogue: O = O / l, LSE = ln2·(m·score_log2 + log2 l); rows that saw no key: 0 and -inf.
  float inv_l[kMT][2];
  float lse[kMT][2];
  softmax.finish(p.score_log2, inv_l, lse);

  if (p.lse != nullptr && t == 0 && part == 0) {
    float* lse_row = p.lse + (varlen ? head * p.total_q + q_first
                                     : (b * p.heads_q + head) * static_cast<int64_t>(p.seqlen_q));
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = warp_row0 + 16 * mt + 8 * h;
        if (row < sq) lse_row[row] = lse[mt][h];
      }
  }

  // The warp's O rows and columns go through its group's Q rows of shared memory (only the
  // group read them), then out as 16-byte row-contiguous stores.
  __syncwarp();
  const uint32_t smem_o = smem_q + group * kWarpRows * kRowBytes;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int ot = 0; ot < kOT; ++ot)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t val = pack2<kIsBf16>(acc_o[mt][ot][2 * h] * inv_l[mt][h],
                                            acc_o[mt][ot][2 * h + 1] * inv_l[mt][h]);
        const int row = 16 * mt + 8 * h + g;  // row % 8 == g
        const uint32_t addr = smem_o + row * kRowBytes + col_bytes + ((ot ^ g) << 4) + 4 * t;
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(val) : "memory");
      }
  __syncwarp();
  const int rows_valid = sq - (m0 + group * kWarpRows);
  T* o_warp = o + static_cast<int64_t>(group * kWarpRows) * p.o_row_stride;
  constexpr int kWarpChunks = kChunks / kSplit;
#pragma unroll
  for (int i = lane; i < kWarpRows * kWarpChunks; i += 32) {
    const int row = i / kWarpChunks;
    const int chunk = part * kWarpChunks + i % kWarpChunks;
    if (row < rows_valid && chunk * 8 < p.head_dim_v) {
      uint4 val;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w)
                   : "r"(smem_o + Swizzle<kHeadDim>::offset(row, chunk))
                   : "memory");
      *reinterpret_cast<uint4*>(o_warp + static_cast<int64_t>(row) * p.o_row_stride + chunk * 8) = val;
    }
  }
}

}  // namespace fa::cuda::sm80
