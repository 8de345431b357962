// CUDA backend, sm90/: the FlashAttention-3-design forward kernel class (TMA, mbarriers, wgmma,
// warp specialisation with setmaxnreg). Persistent: each CTA runs (q-block, head, batch) tiles
// in a static order or, for causal masks, drawn from a counter; warpgroup 0 is the producer (one
// thread picks the tiles and issues TMA loads of Q and a kStages-deep ring of K/V blocks,
// running ahead into the next tile), warpgroups 1 .. kBlockM / 64 (two or three) are consumers,
// each owning 64 query rows: S = Q·Kᵀ (wgmma, both operands in shared memory),
// online softmax in registers, O += P·V (wgmma, P from registers, V transposed by the
// descriptor). Two consumer schedules: `consumer` (each GEMM waited for at once) and
// `consumer_overlapped` (kOverlap); either can take ping-pong turns (kPingPong). A tile's slices
// past the sequence skip it (`consumer_idle`) or, with one slice left, split its keys
// (`consumer_split`), as FwdConfig::kTail says. Receives
// validated FwdParams; does not choose tile sizes or launch.
#pragma once

#include <cuda/atomic>
#include <cuda/ptx>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/convert.cuh"
#include "cuda/common/mask.cuh"
#include "cuda/common/softmax.cuh"
#include "cuda/common/tile_scheduler.cuh"
#include "cuda/ptx/elect.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/named_barrier.cuh"
#include "cuda/ptx/setmaxnreg.cuh"
#include "cuda/ptx/stmatrix.cuh"
#include "cuda/ptx/thread_index.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/sm90/fwd_config.h"
#include "cuda/sm90/fwd_params.h"

namespace fa::cuda::sm90 {

enum class WarpGroupRole { producer = 0, consumer0 = 1, consumer1 = 2 };

// x read from lane 0: the same value, which ptxas then knows to be warp-uniform, so what derives
// from it (a warpgroup's shared-memory bases, the wgmma descriptors) lives in uniform registers
// instead of being computed per thread and moved over (R2UR) before each wgmma.
__device__ __forceinline__ int warp_uniform(int x) { return __shfl_sync(0xffffffffu, x, 0); }

// A warpgroup's m64 x kCols fp32 accumulator (the wgmma layout: warp w holds rows 16w + lane / 4
// and + 8, columns 8i + 2·(lane % 4) and + 1, in acc[4i + 2h], acc[4i + 2h + 1] for row half h)
// into shared memory as 16-bit values, row half h times mul[h] (zeros where `zero`), in the
// layout of the TMA maps: 64-column panels panel_bytes apart, 128-byte rows, 128-byte swizzle.
// base: the address of the warpgroup's row 0 in its first panel. stmatrix x4 = the 8x8 blocks
// (rows + 0, + 8) x (n8 chunks 2i, 2i + 1) of the warp's 16 rows; lane l addresses row 16·warp +
// 8·((l / 8) % 2) + l % 8 of block l / 8, 16-byte chunk c ^ (row % 8) of its panel.
template <bool kIsBf16, int kCols>
__device__ __forceinline__ void warpgroup_stage_sw128(uint32_t base, int panel_bytes, const float (&acc)[kCols / 2],
                                                      const float (&mul)[2], bool zero = false) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) % 128 / 32;
  const uint32_t rows = base + (16 * warp + 8 * ((lane / 8) % 2) + lane % 8) * 128;
#pragma unroll
  for (int i = 0; i < kCols / 16; ++i) {
    const int c = 2 * i + lane / 16;  // n8 chunk of this lane's block
    uint32_t r[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int ot = 2 * i + j / 2, h = j % 2;
      r[j] = zero ? 0u : pack2<kIsBf16>(acc[4 * ot + 2 * h] * mul[h], acc[4 * ot + 2 * h + 1] * mul[h]);
    }
    ptx::warp_stmatrix_x4(rows + (c / 8) * panel_bytes + (((c % 8) ^ (lane % 8)) << 4), r);
  }
}

// One mbarrier in shared memory (uint64), cta:: scope helpers over cuda::ptx.
struct SmemBarrier {
  uint64_t* bar;
  __device__ __forceinline__ void init(uint32_t count) const { ::cuda::ptx::mbarrier_init(bar, count); }
  __device__ __forceinline__ void wait(uint32_t parity) const {
    while (!::cuda::ptx::mbarrier_try_wait_parity(bar, parity)) {
    }
  }
  __device__ __forceinline__ void arrive() const { (void)::cuda::ptx::mbarrier_arrive(bar); }
  // Adds `bytes` to the transaction count of the current phase without arriving.
  __device__ __forceinline__ void expect_tx(uint32_t bytes) const {
    ::cuda::ptx::mbarrier_expect_tx(::cuda::ptx::sem_relaxed, ::cuda::ptx::scope_cta, ::cuda::ptx::space_shared,
                                    bar, bytes);
  }
  __device__ __forceinline__ void arrive_expect_tx(uint32_t bytes) const {
    (void)::cuda::ptx::mbarrier_arrive_expect_tx(::cuda::ptx::sem_release, ::cuda::ptx::scope_cta,
                                               ::cuda::ptx::space_shared, bar, bytes);
  }
};

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_, bool kOverlap_, bool kPingPong_, bool kVarlen_,
          bool kIsBf16_, bool kUniformGroup_, bool kNextS_, int kRowsUnderPv_, bool kSplitProducer_,
          int kTail_, int kPasses_>
struct FwdKernel {
  using Params = FwdParams;

  static constexpr bool kIsBf16 = kIsBf16_;
  static constexpr int kHeadDim = kHeadDim_;  // compiled D (and Dv); smaller ones zero-fill
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  // Intra-warpgroup overlap: Q·K_{j+1}ᵀ and P_j·V_j in flight while the softmax of block j + 1
  // runs (consumer_overlapped); false: the v1 schedule (consumer), each GEMM waited for at once.
  static constexpr bool kOverlap = kOverlap_;
  // Ping-pong: the consumer warpgroups issue their GEMMs in turn (named barriers kTurn + group),
  // so the tensor cores run one warpgroup's GEMMs while the others do their softmax.
  static constexpr bool kPingPong = kPingPong_;
  static constexpr int kTurnBarrier = 1;  // ids 1 .. kConsumerGroups (0 is __syncthreads)
  // Varlen: packed sequences (cu_seqlens), one instantiation of its own so that the dense
  // kernels carry none of its per-tile lookups.
  static constexpr bool kVarlen = kVarlen_;
  // The consumer warpgroup's index read through warp_uniform (its bases and descriptors then in
  // uniform registers), or per thread: chosen per head dim by timing (sm90/fwd_config.h).
  static constexpr bool kUniformGroup = kUniformGroup_;
  // How many of a thread's two rows (0, 1 or 2) the overlapped consumer's softmax finishes
  // under the P·V in flight, before it waits for that P·V and releases its V stage (the rest
  // after). ptxas moves a wgmma wait to the start of the basic block that holds it, ahead of any
  // softmax code there, so the rows meant to run under the P·V are written inside each arm of
  // the mask test and the rest after the join.
  static constexpr int kRowsUnderPv = kRowsUnderPv_;
  static_assert(kRowsUnderPv >= 0 && kRowsUnderPv <= 2, "a thread holds two rows");
  // The producer's loads from two threads, Q and K from one and V from another (producer_v), so
  // that waiting for a V stage to be released holds back no K load; else all from thread 0.
  static constexpr bool kSplitProducer = kSplitProducer_;
  // The slices of a tile past the sequence (sm90/fwd_config.h, kTail): computed, skipped
  // (consumer_idle) or, where one slice is left, its keys split over the warpgroups
  // (consumer_split).
  static constexpr int kTail = kTail_;
  // The passes over S compiled in (common/mask.cuh): softcap and any mask (kPassesAll), or, on
  // the instantiations fwd_launch picks for problems without a softcap (kFwdOwnPasses), only the
  // keys' end (kPassesDense) or the causal mask (kPassesCausal).
  static constexpr int kPasses = kPasses_;
  // The lane of a warp that makes its K/V stage arrivals: lane 0, or on the 192-row kernels with
  // every mask pass an elected one (elect.sync), whose key loops otherwise read the lane index
  // back from local memory each block; elsewhere elect.sync's two instructions a block cost
  // 1–2% (docs/PERF.md, the end of the sm90 backward section).
  __device__ __forceinline__ static bool stage_arriver(int lane) {
    if constexpr (kPasses == kPassesAll && kBlockM == 192) {
      return ptx::warp_elect_one();
    } else {
      return lane == 0;
    }
  }
  // The lane's first column in a masked block, 2·(lane % 4): on the 192-row varlen kernel with
  // every mask pass read anew from threadIdx.x there (ptx::thread_index_anew), where ptxas held
  // it in local memory and read it back on every masked block; elsewhere the consumer's t.
  static constexpr bool kLaneColAnew = kVarlen && kPasses == kPassesAll && kBlockM == 192;
  __device__ __forceinline__ static int mask_col(int t) {
    if constexpr (kLaneColAnew) {
      return 2 * (ptx::thread_index_anew() & 3);
    } else {
      return 2 * t;
    }
  }

  // Warp roles: one producer warpgroup, kBlockM / 64 consumer warpgroups of 64 query rows each.
  static constexpr int kWarpGroupThreads = 128;
  static constexpr int kConsumerGroups = kBlockM / 64;
  static constexpr int kThreads = kWarpGroupThreads * (1 + kConsumerGroups);
  static constexpr int kMinBlocks = 1;  // the register cap setmaxnreg needs at entry
  static constexpr int kConsumerWarps = 4 * kConsumerGroups;
  // 65536 registers per SM: two consumers 128·24 (producer) + 256·240 = 64512; three
  // 128·32 + 384·160 = 65536.
  static constexpr int kProducerRegs = kConsumerGroups == 2 ? 24 : 32;
  static constexpr int kConsumerRegs = kConsumerGroups == 2 ? 240 : 160;
  static_assert(kWarpGroupThreads * (kProducerRegs + kConsumerGroups * kConsumerRegs) <= 65536,
                "register file");

  // Shared memory: 128-byte-swizzled panels of 64 columns (128 bytes a row). Each Q stage:
  // kPanels panels of kBlockM rows; each K and V stage: kPanels panels of kBlockN rows; then the
  // mbarriers. Two Q stages where they fit in the 227 KiB a block may have (the next tile's Q
  // loads while this tile's last blocks run), else one.
  static constexpr int kPanelCols = 64;
  static constexpr int kPanels = kHeadDim / kPanelCols;
  static constexpr int kRowBytes = kPanelCols * 2;  // 128
  static constexpr int kQPanelBytes = kBlockM * kRowBytes;
  static constexpr int kKVPanelBytes = kBlockN * kRowBytes;
  static constexpr int kQBytes = kPanels * kQPanelBytes;
  static constexpr int kKVBytes = kPanels * kKVPanelBytes;
  static constexpr int kAlign = 1024;  // swizzle atom
  static constexpr int kMaxSmem = 227 * 1024;
  // After the tiles: q_full/q_empty per Q stage, k_full/k_empty/v_full/v_empty per K/V stage,
  // with kSplitProducer work_full per Q stage, with kOHalf o_free; then the tile of each Q stage
  // (the producer's hand-over to the consumers and the V thread: a TileWork).
  static constexpr int kSlotBytes = 64;
  static constexpr int kQStages =
      kAlign + 2 * kQBytes + 2 * kStages * kKVBytes + 8 * (6 + 4 * kStages) + 2 * kSlotBytes <= kMaxSmem ? 2 : 1;
  static constexpr int kBaseBarriers = 2 * kQStages + 4 * kStages + (kSplitProducer_ ? kQStages : 0);
  static constexpr int kBaseTailBytes = 8 * kBaseBarriers + kSlotBytes * kQStages;

  // The epilogue through shared memory: each consumer warpgroup writes O / l (16-bit) into its
  // 64 rows of a buffer in the Q layout, one thread stores them by TMA. Dense batches only: a box
  // past a packed sequence would write into the next one. Where shared memory allows (kOBuffer:
  // hdim 64 and 128) the buffer is one of its own, so the tile's Q buffer is released at its last
  // Q·Kᵀ and no thread waits for the store: the issuing thread waits for the previous store's
  // read before the next tile's O goes in, a tile later. Else (hdim 256) it is the tile's Q
  // buffer, released once the store has read it (with one Q buffer the next tile's Q loads only
  // then).
  static constexpr bool kTmaStoreO = !kVarlen;
  static constexpr bool kOBuffer =
      kTmaStoreO && kAlign + (kQStages + 1) * kQBytes + 2 * kStages * kKVBytes + kBaseTailBytes <= kMaxSmem;
  // kOHalf: where a whole O buffer does not fit but 64 rows of one do (hdim 256 with 64-key
  // blocks), the two warpgroups take turns in one 64-row buffer (kOHalfPanelBytes a panel): the
  // warpgroup g store of the CTA's round r is its (2r + g)-th, and waits until the one before
  // has been read (o_free, which that store's issuing thread arrives on). Q is released at the
  // last Q·Kᵀ then, as with kOBuffer, so the next tile's Q loads under this tile's last block
  // and its epilogue. The overlapped schedule only (its rounds number the stores).
  static constexpr int kOHalfPanelBytes = 64 * kRowBytes;
  static constexpr bool kOHalf = kTmaStoreO && !kOBuffer && kOverlap_ && kBlockM == 128 &&
                                 kAlign + kQStages * kQBytes + 2 * kStages * kKVBytes + kPanels * kOHalfPanelBytes +
                                         kBaseTailBytes + 8 <=
                                     kMaxSmem;
  static constexpr int kNumBarriers = kBaseBarriers + (kOHalf ? 1 : 0);
  static constexpr int kTailBytes = 8 * kNumBarriers + kSlotBytes * kQStages;
  static constexpr int kOOffset = kQStages * kQBytes + 2 * kStages * kKVBytes;  // after Q, K, V
  // kTailSplit: after the O buffer, the partial softmax (m, l) and O of every warpgroup but the
  // first, fp32, value-major: [warpgroup - 1][value][thread] (consumer_split).
  static constexpr int kSplitValues = 4 + kHeadDim / 2;
  static constexpr int kSplitOffset = kOOffset + (kOBuffer ? kQBytes : kOHalf ? kPanels * kOHalfPanelBytes : 0);
  static constexpr int kSplitBytes =
      kTail == kTailSplit ? (kConsumerGroups - 1) * kSplitValues * kWarpGroupThreads * 4 : 0;
  static constexpr int kTileBytes = kSplitOffset + kSplitBytes;
  static constexpr int kSmemBytes = kAlign + kTileBytes + kTailBytes;
  static_assert(kSmemBytes <= kMaxSmem, "shared memory");
  // The overlapped schedule issues the next round's first Q·Kᵀ with this tile's last P·V, so
  // that it runs under the epilogue: the next tile's Q must load meanwhile (two Q buffers). A
  // round with no tile, or a tile with no key, gets a stand-in Q·Qᵀ on its own Q buffer instead
  // (nothing writes that buffer then: O is staged elsewhere; kBlockN <= kBlockM keeps the reads
  // inside it), whose result is dropped: every round then starts with exactly one S in flight on
  // every path, which is what ptxas needs to see to keep the wgmmas asynchronous (a conditional
  // issue makes it serialise them all).
  static constexpr bool kNextS = kNextS_ && kOverlap && kQStages == 2 && (kOBuffer || !kTmaStoreO);
  static_assert(!kNextS || kBlockN <= kBlockM, "the stand-in S reads kBlockN rows of a Q buffer");
  static constexpr int kOStoreRows = 64;
  static constexpr int kStoreBarrier = kTurnBarrier + kConsumerGroups;  // one a warpgroup: its 128 threads
  static constexpr int kSplitBarrier = kStoreBarrier + kConsumerGroups;  // every consumer thread

  static constexpr int kNT = kBlockN / 8;  // n8 chunks of S
  static constexpr int kOT = kHeadDim / 8;  // n8 chunks of O

  static_assert(kHeadDim % kPanelCols == 0, "head dim a multiple of 64");
  static_assert(kBlockM == 64 * kConsumerGroups && (kConsumerGroups == 2 || kConsumerGroups == 3),
                "64 rows per consumer warpgroup, two or three of them");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "wgmma n extent / TMA box");

  static constexpr int smem_bytes() { return kSmemBytes; }
  // Are the tiles drawn from a counter (Params::tile_counter) rather than dealt in the static
  // order? Where they differ in cost: under causal-like masks, and where the last q block's keys
  // are split (tile_split: about half a tile's time). The static order deals tile idx to CTA
  // idx % grid, so with a grid that is a multiple of the q blocks a head (132 CTAs, 6 q blocks
  // at 1k) the cheap tiles would all go to the same CTAs.
  static bool draws_tiles(const sm80::FwdParams& p) {
    const int rest = p.seqlen_q % kBlockM;
    return LongestFirstScheduler::by_length(p.mask) || (kTail == kTailSplit && rest > 0 && rest <= 64);
  }
  static dim3 block() { return dim3(kThreads); }
  // Persistent: at most one CTA per SM, each running tiles blockIdx.x, + gridDim.x, ...
  static dim3 grid(const Params& p, int sm_count) {
    const int64_t tiles = LongestFirstScheduler::num_tiles(p.prob.num_m_blocks, p.prob.heads_q, p.prob.batch);
    return dim3(static_cast<unsigned>(tiles < sm_count ? tiles : sm_count));
  }

  __device__ __forceinline__ void operator()(const Params& p, char* smem) const;

 private:
  // What one tile reads: K/V blocks [nb_begin, nb_begin + n_blocks) of kBlockN keys, and the key
  // range [full_lo, full_hi) that every row of the tile sees (blocks inside it need no mask).
  struct TileWork {
    FwdTile tile;
    int q_stage;  // the Q buffer of this tile (set by the round loop)
    int sq, sk;   // this batch's sequence lengths (varlen: from cu_seqlens)
    int q_first;  // varlen: the sequence's first packed row of Q and O, and of K and V; else 0
    int k_first;
    int m0;
    int nb_begin;
    int n_blocks;
    int full_lo;
    int full_hi;
  };
  // The element mask of a partial block: the problem's, or on the instantiations of one mask
  // (their problems have that mask) that mask as a compile-time constant, so that the compiler
  // folds its arithmetic. The general one reads p.mask in place: through a copy (one mask_of
  // for both) ptxas schedules the general kernels' key loops differently.
  __device__ __forceinline__ static void mask_block(float (&s3)[1][kNT][4], const sm80::FwdParams& p, int row0,
                                                    int col0, int sq, int sk) {
    if constexpr (kPasses == kPassesAll) {
      warp_mask_tile<1, kNT>(s3, p.mask, row0, col0, sq, sk);
    } else {
      warp_mask_tile<1, kNT>(s3, fixed_mask<kPasses>(), row0, col0, sq, sk);
    }
  }
  // Does key block [n0, n0 + kBlockN) of tile w need the element mask: not seen whole by every
  // row of the tile, or past the keys' end (sk: w.sk).
  __device__ __forceinline__ static bool partial_block(const TileWork& w, int n0, int sk) {
    if constexpr (kPasses == kPassesDense) return n0 + kBlockN > sk;
    return !(n0 + kBlockN <= sk && w.full_lo <= n0 && w.full_hi >= n0 + kBlockN);
  }
  // The first key blocks of tile w that some row of warpgroup `group`'s 64-row slice sees: where
  // a causal or sliding-window diagonal cuts the tile, its last block can lie past every key of
  // the first slices, and those warpgroups skip it (consumer_overlapped). At least n_blocks − 1
  // (a diagonal of slope 1 moves less than a block over a slice) and 1 (block 0's S may be in
  // flight). Only where causal tiles have such blocks with Sq = Sk (kSkipBlocks): 192 rows over
  // 128-key blocks, 80- or 64-key blocks under 128 rows; at 128 rows over 128 keys, none.
  static constexpr bool kSkipBlocks = kBlockM > kBlockN || kBlockN % 64 != 0;
  __device__ __forceinline__ static int slice_blocks(const sm80::FwdParams& p, int group, const TileWork& w) {
    if constexpr (kPasses == kPassesDense || !kSkipBlocks) {
      return w.n_blocks;
    } else {
      const int last_row = min(w.m0 + 64 * group + 63, w.sq - 1);
      int64_t key_hi;
      if constexpr (kPasses == kPassesAll) {
        key_hi = p.mask.key_end(last_row, w.sq, w.sk);
      } else {
        key_hi = fixed_mask<kPasses>().key_end(last_row, w.sq, w.sk);
      }
      const int64_t seen = (key_hi + kBlockN - 1) / kBlockN - w.nb_begin;
      const int lo = w.n_blocks > 1 ? w.n_blocks - 1 : 1;
      return static_cast<int>(seen < lo ? lo : seen < w.n_blocks ? seen : w.n_blocks);
    }
  }
  // Tile idx: (batch, head)-major for the K/V reuse in L2, except under causal-like masks (later
  // q-blocks see more keys), where tiles go longest first within L2-sized groups of (batch, head)
  // pairs and a last group that covers the grid (LongestFirstScheduler::tile_by_length).
  __device__ __forceinline__ static TileWork tile_work(const Params& params, int idx) {
    const sm80::FwdParams& p = params.prob;
    TileWork w;
    w.tile = LongestFirstScheduler::by_length(p.mask) ? LongestFirstScheduler::tile_by_length(idx, p.num_m_blocks, p.heads_q, p.batch,
                                                               params.section_bh, params.tail_bh)
                       : LongestFirstScheduler::tile(idx, p.num_m_blocks, p.heads_q);
    w.sq = p.seqlen_q;
    w.sk = p.seqlen_k;
    w.q_first = 0;
    w.k_first = 0;
    if constexpr (kVarlen) {
      w.q_first = p.cu_seqlens_q[w.tile.batch];
      w.sq = p.cu_seqlens_q[w.tile.batch + 1] - w.q_first;
      w.k_first = p.cu_seqlens_k[w.tile.batch];
      w.sk = p.cu_seqlens_k[w.tile.batch + 1] - w.k_first;
    }
    const int sq = w.sq;
    const int sk = w.sk;
    w.m0 = w.tile.m_block * kBlockM;
    if (kVarlen && w.m0 >= sq) {  // past this sequence: nothing to read, no row to store
      w.nb_begin = w.n_blocks = w.full_lo = w.full_hi = 0;
      return w;
    }
    // Keys this q-block can see: from key_begin of its first row to key_end of its last.
    const int m_last = min(w.m0 + kBlockM, sq) - 1;
    const int64_t key_lo = p.mask.key_begin(w.m0, sq, sk);
    const int64_t key_hi = p.mask.key_end(m_last, sq, sk);
    w.nb_begin = static_cast<int>(key_lo / kBlockN);
    w.n_blocks = key_hi > key_lo ? static_cast<int>((key_hi + kBlockN - 1) / kBlockN) - w.nb_begin : 0;
    // A block [n0, n0 + BN) needs no element mask iff every row of the q-block sees all of it.
    const int64_t kb_last = p.mask.key_begin(m_last, sq, sk);
    w.full_lo = static_cast<int>(kb_last < sk ? kb_last : sk);
    w.full_hi = static_cast<int>(p.mask.key_end(w.m0, sq, sk));
    return w;
  }

  // The mbarriers: per Q stage q: [q] q_full, [Q + q] q_empty; then per K/V stage s (after
  // 2Q = kQ2): [kQ2 + s] k_full, [kQ2 + S + s] k_empty, [kQ2 + 2S + s] v_full, [kQ2 + 3S + s] v_empty.
  struct Barriers {
    static constexpr int kQ2 = 2 * kQStages;
    uint64_t* bars;
    __device__ __forceinline__ SmemBarrier q_full(int qs) const { return {bars + qs}; }
    __device__ __forceinline__ SmemBarrier q_empty(int qs) const { return {bars + kQStages + qs}; }
    __device__ __forceinline__ SmemBarrier k_full(int st) const { return {bars + kQ2 + st}; }
    __device__ __forceinline__ SmemBarrier k_empty(int st) const { return {bars + kQ2 + kStages + st}; }
    __device__ __forceinline__ SmemBarrier v_full(int st) const { return {bars + kQ2 + 2 * kStages + st}; }
    __device__ __forceinline__ SmemBarrier v_empty(int st) const { return {bars + kQ2 + 3 * kStages + st}; }
    // The tile of Q stage qs written to its slot (for the V thread, which must not wait for Q).
    __device__ __forceinline__ SmemBarrier work_full(int qs) const { return {bars + kQ2 + 4 * kStages + qs}; }
    // kOHalf: the 64-row O buffer was read by the store last issued from it.
    __device__ __forceinline__ SmemBarrier o_free() const { return {bars + kBaseBarriers}; }
  };
  // The K/V ring position of the kv-th block loaded by this CTA (counted over all its tiles).
  __device__ __forceinline__ static int stage_of(int kv) { return kv % kStages; }
  __device__ __forceinline__ static uint32_t phase_of(int kv) { return (kv / kStages) & 1; }

  // Shared-memory addresses of the tiles (32-bit shared window), and the tile index slots: the
  // producer writes the tile of each round (-1: none left) before the round's q_full arrival.
  struct Smem {
    char* base;
    uint32_t q, k, v;
    TileWork* work;       // [kQStages]; n_blocks < 0: no tile left
  };

  // Ping-pong turns, round robin. Each consumer warpgroup brackets every batch of GEMM issues
  // with wait_turn / pass_turn (to the next warpgroup). Every warpgroup takes the same number of
  // turns per tile (one per K/V block, plus one), so the order runs on across tiles: a warpgroup
  // done with its epilogue issues the next tile's first Q·Kᵀ while the others still store. The
  // last warpgroup opens the first turn (open_turns) and warpgroup 0 takes the last pass
  // (close_turns), so no arrival is left at exit. No-ops without kPingPong.
  __device__ __forceinline__ static void wait_turn(int group) {
    if constexpr (kPingPong) ptx::named_barrier_sync(kTurnBarrier + group, 2 * kWarpGroupThreads);
  }
  __device__ __forceinline__ static void pass_turn(int group) {
    if constexpr (kPingPong)
      ptx::named_barrier_arrive(kTurnBarrier + (group + 1) % kConsumerGroups, 2 * kWarpGroupThreads);
  }
  __device__ __forceinline__ static void open_turns(int group) {
    if (group == kConsumerGroups - 1) pass_turn(group);
  }
  __device__ __forceinline__ static void close_turns(int group) {
    if (group == 0) wait_turn(group);
  }

  __device__ __forceinline__ static void producer(const Params& p, const Smem& sm, const Barriers& b);
  // The producer past its CTA's last draw: counts the CTA out of counter[1]; the last one out
  // (every draw of the launch done) resets both words, so the pair is zero for the next launch.
  __device__ __forceinline__ static void leave_tile_counter(int* counter) {
    // Release: this CTA's draws come before its exit; acquire: the last one out sees every draw.
    const int out = ::cuda::atomic_ref<int, ::cuda::thread_scope_device>(counter[1]).fetch_add(
        1, ::cuda::memory_order_acq_rel);
    if (out == static_cast<int>(gridDim.x) - 1) {
      atomicExch(counter, 0);
      atomicExch(counter + 1, 0);
    }
  }
  __device__ __forceinline__ static void producer_v(const Params& p, const Smem& sm, const Barriers& b);
  __device__ __forceinline__ static void load_v(const Params& p, const Smem& sm, const Barriers& b, int stage,
                                                uint32_t phase, int row0, int head_kv, int batch);
  // One tile of one consumer warpgroup; kv_base = the ring position of the tile's first block.
  __device__ __forceinline__ static void consumer(const Params& p, int group, const Smem& sm,
                                                  const Barriers& b, const TileWork& w, int kv_base);
  // The overlapped one takes the S registers from the caller: with kNextS each call finds its
  // round's first S in flight and leaves the next round's in flight (issue_s, round_s_keys).
  __device__ __forceinline__ static void consumer_overlapped(const Params& p, int group, const Smem& sm,
                                                             const Barriers& b, const TileWork& w, int kv_base,
                                                             int round, float (&s)[kNT * 4]);
  // O += P·V issued (not committed) for one warpgroup, V at v_base (a K/V ring stage): MN-major
  // (the transpose bit; leading offset = bytes between 64-column panels, k16 step = 16 rows of
  // 128 bytes). first: O starts from this product (the first k16 step does not accumulate).
  __device__ __forceinline__ static void issue_pv(uint32_t v_base, const uint32_t (&p_frag)[kBlockN / 16][4],
                                                  float (&acc_o)[kOT * 4], bool first);
  // P (the softmax's S, exponentiated in place) as the A operand of P·V: k16 step kk takes n8
  // chunks 2kk and 2kk + 1.
  __device__ __forceinline__ static void pack_p_frag(const float (&s3)[1][kNT][4],
                                                     uint32_t (&p_frag)[kBlockN / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      p_frag[kk][0] = pack2<kIsBf16>(s3[0][2 * kk][0], s3[0][2 * kk][1]);
      p_frag[kk][1] = pack2<kIsBf16>(s3[0][2 * kk][2], s3[0][2 * kk][3]);
      p_frag[kk][2] = pack2<kIsBf16>(s3[0][2 * kk + 1][0], s3[0][2 * kk + 1][1]);
      p_frag[kk][3] = pack2<kIsBf16>(s3[0][2 * kk + 1][2], s3[0][2 * kk + 1][3]);
    }
  }
  // S = Q·Kᵀ issued (not committed) for one warpgroup: m64 n=BN, k16 steps of +32 bytes in each
  // 128-byte row; q_stage: the tile's Q buffer, k_base: the K block (or the stand-in's Q buffer).
  __device__ __forceinline__ static void issue_s(const Smem& sm, int group, int q_stage, uint32_t k_base,
                                                 float (&s)[kNT * 4]);
  // kNextS: waits for round's Q (and its tile's first K block, the kv-th of the CTA) and returns
  // the address issue_s reads the keys from: that K block, or the stand-in's.
  __device__ __forceinline__ static uint32_t round_s_keys(const Smem& sm, const Barriers& b, int round, int kv);
  // Does the warpgroup's 64-row slice of the tile lie wholly past the sequence (the last q block
  // of a length that is no multiple of kBlockM)? Then it has nothing to compute or store.
  __device__ __forceinline__ static bool slice_idle(int group, const TileWork& w) {
    return kTail != kTailCompute && w.m0 + 64 * group >= w.sq;
  }
  // Is the tile's key range split over the warpgroups (consumer_split): one slice in the
  // sequence, and at least one key block for each warpgroup? The same for every warpgroup.
  __device__ __forceinline__ static bool tile_split(const TileWork& w) {
    return kTail == kTailSplit && w.m0 + 64 >= w.sq && w.n_blocks >= kConsumerGroups;
  }
  // The split tile: warpgroup g computes the first slice's S, softmax and P·V over the key blocks
  // g, g + G, g + 2G, ... (each GEMM waited for at once, no ping-pong turns), keeps its arrivals on
  // the other blocks' stages, then the warpgroups combine their m, l and O through shared memory
  // and the first stores the slice. With kNextS the next round's S_0 goes out in one turn.
  __device__ __forceinline__ static void consumer_split(const Params& p, int group, const Smem& sm,
                                                        const Barriers& b, const TileWork& w, int kv_base,
                                                        int round, float (&s)[kNT * 4]);
  // Softcap, the element mask where block it is not wholly visible to rows row0 (+ 8), the
  // softmax step (O rescaled) and P packed as the A operand of the P·V: the v1 schedule's block.
  __device__ __forceinline__ static void scores_to_p(const sm80::FwdParams& p, const TileWork& w, int it, int row0,
                                                     float (&s)[kNT * 4], OnlineSoftmax<1>& softmax,
                                                     float (&o3)[1][kOT][4], uint32_t (&p_frag)[kBlockN / 16][4]);
  // The first warpgroup's m, l and O become the combination of every warpgroup's (consumer_split).
  __device__ __forceinline__ static void combine_split(const Smem& sm, int group, float score_log2,
                                                       OnlineSoftmax<1>& softmax, float (&acc_o)[kOT * 4]);
  // An idle slice's tile: no GEMM of its own, only what the other warpgroups and the producer
  // count on: its arrivals on every K/V stage and on the Q buffer, as many ping-pong turns as a
  // computing warpgroup takes, and with kNextS the next round's S_0 in flight on exit.
  __device__ __forceinline__ static void consumer_idle(const Smem& sm, int group, const Barriers& b,
                                                       const TileWork& w, int kv_base, int round,
                                                       float (&s)[kNT * 4]);
  // Does O leave by TMA stores (staged as kOBuffer says)? Uniform over the grid.
  __device__ __forceinline__ static bool o_by_tma(const Params& p) { return kTmaStoreO && p.o_by_tma != 0; }
  // Is the tile's Q buffer free once the warpgroup's last Q·Kᵀ has landed (O not staged in it)?
  __device__ __forceinline__ static bool q_freed_at_last_qk(const Params& p) {
    return kOBuffer || kOHalf || !o_by_tma(p);
  }
  // O = O / l and LSE of the warpgroup's 64 rows: by TMA from the staging buffer (o_by_tma; when
  // that is the tile's Q buffer, released here once read), else by plain stores from the
  // accumulators. round: the CTA's round (kOHalf numbers its stores by it).
  __device__ __forceinline__ static void store_tile(const Params& params, int group, const Smem& sm,
                                                    const Barriers& b, const TileWork& w, int round,
                                                    OnlineSoftmax<1>& softmax, float (&o3)[1][kOT][4]);
};

template <int D, int BM, int BN, int S, bool Ov, bool Pp, bool Vl, bool Bf16, bool Ug, bool Ns, int Ru, bool Sp, int Tl, int Ps>
__device__ __forceinline__ void FwdKernel<D, BM, BN, S, Ov, Pp, Vl, Bf16, Ug, Ns, Ru, Sp, Tl, Ps>::operator()(const Params& params,
                                                                                  char* smem_raw) const {
  // 1024-byte aligned tiles (the swizzle atom), then the barriers.
  const uint32_t raw = ptx::smem_u32(smem_raw);
  const uint32_t pad = (kAlign - (raw % kAlign)) % kAlign;
  Smem sm;
  sm.base = smem_raw + pad;
  sm.q = raw + pad;
  sm.k = sm.q + kQStages * kQBytes;
  sm.v = sm.k + kStages * kKVBytes;
  const Barriers b{reinterpret_cast<uint64_t*>(sm.base + kTileBytes)};
  sm.work = reinterpret_cast<TileWork*>(sm.base + kTileBytes + 8 * kNumBarriers);

  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    for (int q = 0; q < kQStages; ++q) {
      b.q_full(q).init(1);
      if (kSplitProducer) b.work_full(q).init(1);  // past the last barrier otherwise: the tile slots
      // Every consumer thread read its slot and released Q, and the V thread read the slot.
      b.q_empty(q).init(kConsumerGroups * kWarpGroupThreads + (kSplitProducer ? 1 : 0));
    }
    for (int s = 0; s < kStages; ++s) {
      b.k_full(s).init(1);
      b.k_empty(s).init(kConsumerWarps);
      b.v_full(s).init(1);
      b.v_empty(s).init(kConsumerWarps);
    }
    if (kOHalf) b.o_free().init(1);  // the issuing thread of each store
    ::cuda::ptx::fence_mbarrier_init(::cuda::ptx::sem_release, ::cuda::ptx::scope_cluster);
  }
  __syncthreads();

  const WarpGroupRole role = static_cast<WarpGroupRole>(tid / kWarpGroupThreads);
  if (role == WarpGroupRole::producer) {
    ptx::warpgroup_reg_dealloc<kProducerRegs>();
    if (tid == 0) producer(params, sm, b);
    if (kSplitProducer && tid == 32) producer_v(params, sm, b);
  } else {
    ptx::warpgroup_reg_alloc<kConsumerRegs>();
    const int group = kUniformGroup ? warp_uniform(tid / kWarpGroupThreads - 1) : tid / kWarpGroupThreads - 1;
    int kv_base = 0;
    float s[kNT * 4];  // S of the overlapped schedule, which runs on into the next round (kNextS)
    open_turns(group);
    if constexpr (kNextS) {  // round 0's first S, in a turn of its own
      const uint32_t k0 = round_s_keys(sm, b, 0, 0);
      wait_turn(group);
      ptx::warpgroup_fence();
      issue_s(sm, group, 0, k0, s);
      ptx::warpgroup_commit();
      pass_turn(group);
    }
    for (int round = 0;; ++round) {
      const int qs = round % kQStages;
      b.q_full(qs).wait((round / kQStages) & 1);
      TileWork w = sm.work[qs];  // written before the producer's q_full arrival
      if (w.n_blocks < 0) break;
      w.q_stage = qs;
      if constexpr (!kVarlen) {  // the same for every tile: from the parameters, which stay at hand
        w.sq = params.prob.seqlen_q;
        w.sk = params.prob.seqlen_k;
        w.q_first = w.k_first = 0;
      }
      const auto compute = [&]() {
        if constexpr (kOverlap) {
          consumer_overlapped(params, group, sm, b, w, kv_base, round, s);
        } else {
          consumer(params, group, sm, b, w, kv_base);
        }
        if (w.n_blocks == 0 && q_freed_at_last_qk(params)) b.q_empty(w.q_stage).arrive();  // else after the last S
      };
      if constexpr (kTail == kTailCompute) {
        compute();
      } else if (tile_split(w)) {
        consumer_split(params, group, sm, b, w, kv_base, round, s);
      } else if (slice_idle(group, w)) {
        consumer_idle(sm, group, b, w, kv_base, round, s);
      } else {
        compute();
      }
      kv_base += w.n_blocks;
    }
    if constexpr (kNextS) ptx::warpgroup_wait<0>();  // the stand-in S of the round that found no tile
    close_turns(group);
    // The last store must have read the staging buffer before the CTA's shared memory goes.
    if (kOBuffer && threadIdx.x % kWarpGroupThreads == 0)
      ::cuda::ptx::cp_async_bulk_wait_group_read(::cuda::ptx::n32_t<0>{});
  }
}

// Thread 0: per tile, Q once it is free (kPanels boxes of 64 columns x kBlockM rows), then the
// tile's K and V blocks through the kStages-deep ring, or with kSplitProducer the K blocks only
// (thread 32, producer_v, loads the V blocks). The ring and the Q buffer run on over the tiles,
// so the next tile's loads overlap this tile's last blocks and epilogue.
template <int D, int BM, int BN, int S, bool Ov, bool Pp, bool Vl, bool Bf16, bool Ug, bool Ns, int Ru, bool Sp, int Tl, int Ps>
__device__ __forceinline__ void FwdKernel<D, BM, BN, S, Ov, Pp, Vl, Bf16, Ug, Ns, Ru, Sp, Tl, Ps>::producer(const Params& params,
                                                                                const Smem& sm,
                                                                                const Barriers& b) {
  const sm80::FwdParams& p = params.prob;
  const int64_t num_tiles = int64_t{p.num_m_blocks} * p.heads_q * p.batch;  // < 2^31 (can_implement)
  int kv = 0;
  int64_t idx = blockIdx.x;
  for (int round = 0;; ++round) {
    const int qs = round % kQStages;
    // The consumers released this Q buffer's previous tile (a fresh barrier's "previous phase"
    // counts as complete, so the first wait on each buffer passes).
    b.q_empty(qs).wait(((round / kQStages) & 1) ^ 1);
    if (idx >= num_tiles) {  // none left: tell the consumers and the V thread, with no bytes to wait for
      sm.work[qs].n_blocks = -1;
      if (kSplitProducer) b.work_full(qs).arrive();
      b.q_full(qs).arrive();
      if (params.tile_counter != nullptr) leave_tile_counter(params.tile_counter);
      break;
    }
    const TileWork w = tile_work(params, static_cast<int>(idx));
    sm.work[qs] = w;  // the consumers' copy (one computation a tile, not one a thread)
    if (kSplitProducer) b.work_full(qs).arrive();
    const int batch = kVarlen ? 0 : w.tile.batch;  // varlen maps: one packed batch
    const int head_kv = w.tile.head / p.group;
    b.q_full(qs).arrive_expect_tx(kQBytes);
    for (int c = 0; c < kPanels; ++c) {
      const int32_t coords[4] = {c * kPanelCols, w.q_first + w.m0, w.tile.head, batch};
      ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_cluster, ::cuda::ptx::space_global,
                                        sm.base + qs * kQBytes + c * kQPanelBytes, &params.tm_q, coords,
                                        b.q_full(qs).bar);
    }
    for (int it = 0; it < w.n_blocks; ++it, ++kv) {
      const int stage = stage_of(kv);
      const uint32_t phase = phase_of(kv);
      const int n0 = (w.nb_begin + it) * kBlockN;
      b.k_empty(stage).wait(phase ^ 1);
      b.k_full(stage).arrive_expect_tx(kKVBytes);
      for (int c = 0; c < kPanels; ++c) {
        const int32_t coords[4] = {c * kPanelCols, w.k_first + n0, head_kv, batch};
        ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_cluster, ::cuda::ptx::space_global,
                                          sm.base + kQStages * kQBytes + stage * kKVBytes + c * kKVPanelBytes,
                                          &params.tm_k, coords, b.k_full(stage).bar);
      }
      if (!kSplitProducer) load_v(params, sm, b, stage, phase, w.k_first + n0, head_kv, batch);
    }
    idx = params.tile_counter != nullptr ? gridDim.x + int64_t{atomicAdd(params.tile_counter, 1)}
                                         : LongestFirstScheduler::persistent_index(round + 1);
  }
}

// Thread 32: the V blocks of the tiles thread 0 chose, in the same ring order. It reads each
// tile's slot once work_full says it is written, then counts itself on that Q stage's q_empty
// (so the slot is not rewritten before it was read).
template <int D, int BM, int BN, int S, bool Ov, bool Pp, bool Vl, bool Bf16, bool Ug, bool Ns, int Ru, bool Sp, int Tl, int Ps>
__device__ __forceinline__ void FwdKernel<D, BM, BN, S, Ov, Pp, Vl, Bf16, Ug, Ns, Ru, Sp, Tl, Ps>::producer_v(const Params& params,
                                                                                  const Smem& sm,
                                                                                  const Barriers& b) {
  const sm80::FwdParams& p = params.prob;
  int kv = 0;
  for (int round = 0;; ++round) {
    const int qs = round % kQStages;
    b.work_full(qs).wait((round / kQStages) & 1);
    const TileWork w = sm.work[qs];
    if (w.n_blocks < 0) break;
    b.q_empty(qs).arrive();
    const int batch = kVarlen ? 0 : w.tile.batch;
    const int head_kv = w.tile.head / p.group;
    for (int it = 0; it < w.n_blocks; ++it, ++kv)
      load_v(params, sm, b, stage_of(kv), phase_of(kv), w.k_first + (w.nb_begin + it) * kBlockN, head_kv, batch);
  }
}

// The V block of key rows row0.. into ring stage `stage` once the consumers released it.
template <int D, int BM, int BN, int S, bool Ov, bool Pp, bool Vl, bool Bf16, bool Ug, bool Ns, int Ru, bool Sp, int Tl, int Ps>
__device__ __forceinline__ void FwdKernel<D, BM, BN, S, Ov, Pp, Vl, Bf16, Ug, Ns, Ru, Sp, Tl, Ps>::load_v(
    const Params& params, const Smem& sm, const Barriers& b, int stage, uint32_t phase, int row0, int head_kv,
    int batch) {
  b.v_empty(stage).wait(phase ^ 1);
  b.v_full(stage).arrive_expect_tx(kKVBytes);
  for (int c = 0; c < kPanels; ++c) {
    const int32_t coords[4] = {c * kPanelCols, row0, head_kv, batch};
    ::cuda::ptx::cp_async_bulk_tensor(
        ::cuda::ptx::space_cluster, ::cuda::ptx::space_global,
        sm.base + kQStages * kQBytes + kStages * kKVBytes + stage * kKVBytes + c * kKVPanelBytes, &params.tm_v,
        coords, b.v_full(stage).bar);
  }
}

template <int D, int BM, int BN, int S, bool Ov, bool Pp, bool Vl, bool Bf16, bool Ug, bool Ns, int Ru, bool Sp, int Tl, int Ps>
__device__ __forceinline__ void FwdKernel<D, BM, BN, S, Ov, Pp, Vl, Bf16, Ug, Ns, Ru, Sp, Tl, Ps>::consumer(const Params& params, int group,
                                                                                const Smem& sm,
                                                                                const Barriers& b,
                                                                                const TileWork& w,
                                                                                int kv_base) {
  const sm80::FwdParams& p = params.prob;
  const int tid = static_cast<int>(threadIdx.x) % kWarpGroupThreads;
  const int warp = tid / 32;  // within the warpgroup: rows 16·warp .. 16·warp + 15
  const int lane = tid % 32;
  const int row0 = w.m0 + 64 * group + 16 * warp + lane / 4;  // sequence row of d[4i], d[4i+1]
  const int n_blocks = w.n_blocks;

  float acc_o[kOT * 4];
#pragma unroll
  for (int i = 0; i < kOT * 4; ++i) acc_o[i] = 0.f;
  auto& o3 = reinterpret_cast<float(&)[1][kOT][4]>(acc_o);
  OnlineSoftmax<1> softmax;
  softmax.init();

  for (int it = 0; it < n_blocks; ++it) {
    const int stage = stage_of(kv_base + it);
    const uint32_t phase = phase_of(kv_base + it);

    // S = Q·K_itᵀ
    float s[kNT * 4];
    b.k_full(stage).wait(phase);
    wait_turn(group);
    ptx::warpgroup_fence_operand(s);
    ptx::warpgroup_fence();
    issue_s(sm, group, w.q_stage, sm.k + stage * kKVBytes, s);
    ptx::warpgroup_commit();
    pass_turn(group);
    ptx::warpgroup_wait<0>();
    ptx::warpgroup_fence_operand(s);
    if (stage_arriver(lane)) b.k_empty(stage).arrive();  // this warp's reads of K_it are done
    if (it + 1 == n_blocks && q_freed_at_last_qk(params)) b.q_empty(w.q_stage).arrive();  // and of Q (and the slot)

    uint32_t p_frag[kBlockN / 16][4];
    scores_to_p(p, w, it, row0, s, softmax, o3, p_frag);

    // O += P·V_it
    b.v_full(stage).wait(phase);
    const uint32_t v_base = sm.v + stage * kKVBytes;
    wait_turn(group);
    ptx::warpgroup_fence_operand(acc_o);
    ptx::warpgroup_fence();
    issue_pv(v_base, p_frag, acc_o, false);
    ptx::warpgroup_commit();
    pass_turn(group);
    ptx::warpgroup_wait<0>();
    ptx::warpgroup_fence_operand(acc_o);
    if (stage_arriver(lane)) b.v_empty(stage).arrive();
  }
  store_tile(params, group, sm, b, w, 0, softmax, o3);  // not kOHalf (the overlapped schedule only)
}

template <int D, int BM, int BN, int S, bool Ov, bool Pp, bool Vl, bool Bf16, bool Ug, bool Ns, int Ru, bool Sp, int Tl, int Ps>
__device__ __forceinline__ void FwdKernel<D, BM, BN, S, Ov, Pp, Vl, Bf16, Ug, Ns, Ru, Sp, Tl, Ps>::store_tile(
    const Params& params, int group, const Smem& sm, const Barriers& b, const TileWork& w, int round,
    OnlineSoftmax<1>& softmax, float (&o3)[1][kOT][4]) {
  const sm80::FwdParams& p = params.prob;
  const int sq = w.sq;
  const int tid = static_cast<int>(threadIdx.x) % kWarpGroupThreads;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int t = lane % 4;
  const int row0 = w.m0 + 64 * group + 16 * warp + lane / 4;
  constexpr bool varlen = kVarlen;
  // O = O / l, LSE = ln2·(m·score_log2 + log2 l); rows that saw no key: 0 and -inf.
  float inv_l[1][2];
  float lse[1][2];
  softmax.finish(p.score_log2, inv_l, lse);

  using T = typename Storage<kIsBf16>::type;
  const int64_t batch = w.tile.batch;
  const int head = w.tile.head;
  if (p.lse != nullptr && t == 0) {
    float* lse_row = p.lse + (varlen ? head * p.total_q + w.q_first
                                     : (batch * p.heads_q + head) * static_cast<int64_t>(p.seqlen_q));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      if (row < sq) lse_row[row] = lse[0][h];
    }
  }
  if (o_by_tma(params)) {
    namespace cp = ::cuda::ptx;
    // This warpgroup's 64 rows of the staging buffer, in the Q layout: its own buffer once the
    // previous tile's store has read it, the 64-row buffer once the store before this one has
    // read it (kOHalf), or the tile's Q buffer (its own Q·Kᵀ GEMMs, their only readers, have
    // landed).
    const uint32_t stage_off = kOBuffer || kOHalf ? kOOffset : w.q_stage * kQBytes;  // from sm.q / sm.base
    const int panel_bytes = kOHalf ? kOHalfPanelBytes : kQPanelBytes;
    const int row_off = kOHalf ? 0 : 64 * group * kRowBytes;
    if constexpr (kOBuffer) {
      if (tid == 0) cp::cp_async_bulk_wait_group_read(cp::n32_t<0>{});
      ptx::named_barrier_sync(kStoreBarrier + group, kWarpGroupThreads);
    }
    if constexpr (kOHalf) {
      const int n = 2 * round + group;
      if (n > 0) b.o_free().wait((n - 1) & 1);
    }
    warpgroup_stage_sw128<kIsBf16, kHeadDim>(sm.q + stage_off + row_off, panel_bytes,
                                             reinterpret_cast<const float(&)[kOT * 4]>(o3), inv_l[0]);
    // Generic-proxy writes, read by TMA (async proxy): fence, then the warpgroup's barrier.
    cp::fence_proxy_async(cp::space_shared);
    ptx::named_barrier_sync(kStoreBarrier + group, kWarpGroupThreads);
    if (tid == 0) {
      for (int c = 0; c < kPanels; ++c) {
        const int32_t coords[4] = {c * kPanelCols, w.m0 + 64 * group, head, static_cast<int32_t>(batch)};
        cp::cp_async_bulk_tensor(cp::space_global, cp::space_shared, &params.tm_o, coords,
                                 sm.base + stage_off + c * panel_bytes + row_off);
      }
      cp::cp_async_bulk_commit_group();
      if constexpr (!kOBuffer) cp::cp_async_bulk_wait_group_read(cp::n32_t<0>{});
      if constexpr (kOHalf) b.o_free().arrive();
    }
    if constexpr (!kOBuffer && !kOHalf) {
      ptx::named_barrier_sync(kStoreBarrier + group, kWarpGroupThreads);  // the buffer was read: free it
      b.q_empty(w.q_stage).arrive();
    }
    return;
  }
  T* o = static_cast<T*>(p.o) + (varlen ? w.q_first * p.o_row_stride : batch * p.o_batch_stride) +
         head * p.o_head_stride;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    if (row >= sq) continue;
    T* o_row = o + static_cast<int64_t>(row) * p.o_row_stride;
#pragma unroll
    for (int ot = 0; ot < kOT; ++ot) {
      const int col = 8 * ot + 2 * t;
      if (col < p.head_dim_v) {
        const uint32_t val = pack2<kIsBf16>(o3[0][ot][2 * h] * inv_l[0][h], o3[0][ot][2 * h + 1] * inv_l[0][h]);
        *reinterpret_cast<uint32_t*>(o_row + col) = val;
      }
    }
  }
}

// The softmax of one S block that leaves O alone, for the overlapped schedule (P·V of the previous
// block still writes O): m_new = max(m_old, rowmax(S)); P = exp2(S·c − m_new·c) in place;
// l = alpha·l + rowsum(P). Returns alpha = exp2(m_old·c − m_new·c), by which O is scaled once the
// P·V in flight has landed. The arithmetic of OnlineSoftmax::step (common/softmax.cuh); with kLazy
// (lazy rescaling, kFwdLazyRescale) the row keeps m_old (alpha = 1, O left as it is) unless
// rowmax(S) exceeds it by more than kLazyRescaleLog2 in the exponent, so P ≤ 2^kLazyRescaleLog2:
// O, l and the LSE only need P, l and m to agree, and bf16 / fp16 P keeps its relative precision
// at that size.
inline constexpr float kLazyRescaleLog2 = 8.f;
template <bool kLazy, int kNT, int kRowBegin = 0, int kRowEnd = 2>
__device__ __forceinline__ void warp_softmax_deferred(OnlineSoftmax<1>& sm, float (&s)[1][kNT][4],
                                                      float score_log2, float (&alpha)[2]) {
#pragma unroll
  for (int h = kRowBegin; h < kRowEnd; ++h) {
    // m_new = max(m_old, rowmax(S_ij))
    float m_new = sm.row_max[0][h];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) m_new = fmaxf(m_new, fmaxf(s[0][nt][2 * h], s[0][nt][2 * h + 1]));
    m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 1));
    m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 2));
    // kLazy: m_new = m_old unless (m_new − m_old)·c > kLazyRescaleLog2 (a first visible key
    // always moves it: inf; a row with none yet keeps −inf: NaN)
    const float m_old = sm.row_max[0][h];
    if (kLazy && !((m_new - m_old) * score_log2 > kLazyRescaleLog2)) m_new = m_old;
    // A row that has seen no key yet keeps m = -inf; shift by 0 there so exp2 gives 0.
    const float m_scaled = m_new == -INFINITY ? 0.f : m_new * score_log2;
    alpha[h] = kLazy && m_new == m_old ? 1.f : ptx::ex2_approx(m_old * score_log2 - m_scaled);
    sm.row_max[0][h] = m_new;
    // P_ij = exp2(S_ij·c − m_new·c);  l = alpha·l + rowsum(P_ij)
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pv = ptx::ex2_approx(fmaf(s[0][nt][2 * h + e], score_log2, -m_scaled));
        s[0][nt][2 * h + e] = pv;
        sum += pv;
      }
    }
    sm.row_sum[0][h] = fmaf(sm.row_sum[0][h], alpha[h], sum);
  }
}

// Overlapped consumer (kOverlap): per K/V block j >= 1 the warpgroup issues S_j = Q·K_jᵀ and
// O += P_{j-1}·V_{j-1} back to back, waits for S_j only, runs kRowsUnderPv rows of the softmax
// of block j while P_{j-1}·V_{j-1} is still in flight, then waits for it, releases V_{j-1}, runs
// the other rows and rescales O (with kRowsUnderPv 0 the softmax runs under the other warpgroups'
// GEMMs only, as ping-pong arranges). Registers: S, P (the A
// operand of the P·V in flight, kept live until it lands) and O. With kNextS the tile's S_0 is
// in flight on entry, and the last P·V goes out with the next round's S_0 (its Q buffer is the
// other one), which then runs under this tile's epilogue.
template <int D, int BM, int BN, int S, bool Ov, bool Pp, bool Vl, bool Bf16, bool Ug, bool Ns, int Ru, bool Sp, int Tl, int Ps>
__device__ __forceinline__ void FwdKernel<D, BM, BN, S, Ov, Pp, Vl, Bf16, Ug, Ns, Ru, Sp, Tl, Ps>::consumer_overlapped(
    const Params& params, int group, const Smem& sm, const Barriers& b, const TileWork& w, int kv_base, int round,
    float (&s)[kNT * 4]) {
  const sm80::FwdParams& p = params.prob;
  const int sq = w.sq;
  const int sk = w.sk;
  const int tid = static_cast<int>(threadIdx.x) % kWarpGroupThreads;
  const int warp = tid / 32;  // within the warpgroup: rows 16·warp .. 16·warp + 15
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int row0 = w.m0 + 64 * group + 16 * warp + g;  // sequence row of d[4i], d[4i+1]
  const int n_blocks = w.n_blocks;
  const int n_own = slice_blocks(p, group, w);  // block n_own (if < n_blocks): skipped

  // O starts from its first P·V's zero-accumulate flag, not from moves, which would define a
  // wgmma accumulator while this tile's S_0 is in flight.
  float acc_o[kOT * 4];
  auto& o3 = reinterpret_cast<float(&)[1][kOT][4]>(acc_o);
  OnlineSoftmax<1> softmax;
  softmax.init();
  auto& s3 = reinterpret_cast<float(&)[1][kNT][4]>(s);
  uint32_t p_frag[kBlockN / 16][4];
  auto& p_flat = reinterpret_cast<uint32_t(&)[kBlockN / 16 * 4]>(p_frag);

  constexpr bool kLazy = kFwdLazyRescale<D>;
  const auto issue_qk = [&](int st) { issue_s(sm, group, w.q_stage, sm.k + st * kKVBytes, s); };
  // Softcap, mask and the first kRowsUnderPv rows of the softmax of block it (in S); alpha as
  // warp_softmax_deferred.
  const auto scores = [&](int it, float (&alpha)[2]) {
    if (kPasses == kPassesAll && p.softcap > 0.f) {
#pragma unroll
      for (int i = 0; i < kNT * 4; ++i) s[i] = p.softcap * softcap_tanh(s[i] * p.softcap_in);
    }
    const int n0 = (w.nb_begin + it) * kBlockN;
    const bool partial = partial_block(w, n0, sk);
    if constexpr (kRowsUnderPv > 0) {
      if (partial) {
        mask_block(s3, p, row0, n0 + mask_col(t), sq, sk);
        warp_softmax_deferred<kLazy, kNT, 0, kRowsUnderPv>(softmax, s3, p.score_log2, alpha);
      } else {
        warp_softmax_deferred<kLazy, kNT, 0, kRowsUnderPv>(softmax, s3, p.score_log2, alpha);
      }
    } else {
      if (partial) mask_block(s3, p, row0, n0 + mask_col(t), sq, sk);
    }
  };
  // The rows of the softmax after the P·V's wait.
  const auto scores_rest = [&](float (&alpha)[2]) {
    warp_softmax_deferred<kLazy, kNT, kRowsUnderPv, 2>(softmax, s3, p.score_log2, alpha);
  };
  const auto pack_p = [&]() { pack_p_frag(s3, p_frag); };

  if constexpr (kNextS) {  // this round's S_0 (or its stand-in) has been in flight
    ptx::warpgroup_wait<0>();
    ptx::warpgroup_fence_operand(s);
  }
  if (n_blocks > 0) {
    // Block 0: S_0, then P_0 (O is still zero: nothing to rescale).
    float alpha[2];
    const int st0 = stage_of(kv_base);
    if constexpr (!kNextS) {
      b.k_full(st0).wait(phase_of(kv_base));
      wait_turn(group);
      ptx::warpgroup_fence_operand(s);
      ptx::warpgroup_fence();
      issue_qk(st0);
      ptx::warpgroup_commit();
      pass_turn(group);
      ptx::warpgroup_wait<0>();
    }
    ptx::warpgroup_fence_operand(s);
    if (stage_arriver(lane)) b.k_empty(st0).arrive();
    if (n_own == 1 && q_freed_at_last_qk(params)) b.q_empty(w.q_stage).arrive();
    scores(0, alpha);
    scores_rest(alpha);
    pack_p();

    for (int it = 1; it < n_own; ++it) {
      const int stage = stage_of(kv_base + it);
      const int prev = stage_of(kv_base + it - 1);
      b.k_full(stage).wait(phase_of(kv_base + it));
      b.v_full(prev).wait(phase_of(kv_base + it - 1));
      ptx::warpgroup_fence_operand(s);
      ptx::warpgroup_fence_operand(acc_o);
      ptx::warpgroup_fence_operand(p_flat);
      wait_turn(group);
      ptx::warpgroup_fence();
      issue_qk(stage);  // S_it = Q·K_itᵀ
      ptx::warpgroup_commit();
      issue_pv(sm.v + prev * kKVBytes, p_frag, acc_o, it == 1);  // O += P_{it-1}·V_{it-1}
      ptx::warpgroup_commit();
      pass_turn(group);
      ptx::warpgroup_wait<1>();  // S_it landed; the P·V may still run
      ptx::warpgroup_fence_operand(s);
      if (stage_arriver(lane)) b.k_empty(stage).arrive();
      if (it + 1 == n_own && q_freed_at_last_qk(params)) b.q_empty(w.q_stage).arrive();  // the last read of Q
      scores(it, alpha);
      ptx::warpgroup_wait<0>();  // P_{it-1}·V_{it-1} landed
      ptx::warpgroup_fence_operand(acc_o);
      ptx::warpgroup_fence_operand(p_flat);
      if (stage_arriver(lane)) b.v_empty(prev).arrive();
      scores_rest(alpha);
      // O = alpha·O (kLazy: by the warps with a row whose maximum moved; most blocks have none)
      if (!kLazy || __any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
        for (int ot = 0; ot < kOT; ++ot)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            o3[0][ot][2 * h] *= alpha[h];
            o3[0][ot][2 * h + 1] *= alpha[h];
          }
      }
      pack_p();
    }
    // O += P_last·V_last (the slice's last block), then with kNextS the next round's S_0 once its
    // Q and first K block are in (the P·V runs meanwhile). A skipped block takes its turn between
    // the two, with no GEMM: its arrivals as the computing warpgroups'.
    const int last = stage_of(kv_base + n_own - 1);
    b.v_full(last).wait(phase_of(kv_base + n_own - 1));
    ptx::warpgroup_fence_operand(acc_o);
    ptx::warpgroup_fence_operand(p_flat);
    ptx::warpgroup_fence_operand(s);
    wait_turn(group);
    ptx::warpgroup_fence();
    issue_pv(sm.v + last * kKVBytes, p_frag, acc_o, n_own == 1);
    ptx::warpgroup_commit();
    if (n_own < n_blocks) {
      pass_turn(group);
      const int st = stage_of(kv_base + n_own);
      const uint32_t ph = phase_of(kv_base + n_own);
      b.k_full(st).wait(ph);
      if (stage_arriver(lane)) b.k_empty(st).arrive();
      b.v_full(st).wait(ph);
      if (stage_arriver(lane)) b.v_empty(st).arrive();
      wait_turn(group);
    }
    if constexpr (kNextS) {
      const uint32_t next_k = round_s_keys(sm, b, round + 1, kv_base + n_blocks);
      ptx::warpgroup_fence();  // else ptxas injects it here (C7519): the same SASS
      issue_s(sm, group, (round + 1) % kQStages, next_k, s);
      ptx::warpgroup_commit();
    }
    pass_turn(group);
    ptx::warpgroup_wait<kNextS ? 1 : 0>();  // the P·V landed (the next S_0 runs on)
    ptx::warpgroup_fence_operand(acc_o);
    ptx::warpgroup_fence_operand(p_flat);
    if (stage_arriver(lane)) b.v_empty(last).arrive();
  } else {
#pragma unroll
    for (int i = 0; i < kOT * 4; ++i) acc_o[i] = 0.f;  // no key: O = 0 (and LSE = -inf)
    if constexpr (kNextS) {  // the next round's S_0, in the turn the last P·V would have taken
      const uint32_t next_k = round_s_keys(sm, b, round + 1, kv_base);
      ptx::warpgroup_fence_operand(s);
      wait_turn(group);
      ptx::warpgroup_fence();
      issue_s(sm, group, (round + 1) % kQStages, next_k, s);
      ptx::warpgroup_commit();
      pass_turn(group);
    }
  }
  store_tile(params, group, sm, b, w, round, softmax, o3);
}

template <int D, int BM, int BN, int S, bool Ov, bool Pp, bool Vl, bool Bf16, bool Ug, bool Ns, int Ru, bool Sp, int Tl, int Ps>
__device__ __forceinline__ void FwdKernel<D, BM, BN, S, Ov, Pp, Vl, Bf16, Ug, Ns, Ru, Sp, Tl, Ps>::scores_to_p(
    const sm80::FwdParams& p, const TileWork& w, int it, int row0, float (&s)[kNT * 4], OnlineSoftmax<1>& softmax,
    float (&o3)[1][kOT][4], uint32_t (&p_frag)[kBlockN / 16][4]) {
  auto& s3 = reinterpret_cast<float(&)[1][kNT][4]>(s);
  // S = softcap·tanh(scale·S / softcap) when a softcap is set (uniform branch).
  if (kPasses == kPassesAll && p.softcap > 0.f) {
#pragma unroll
    for (int i = 0; i < kNT * 4; ++i) s[i] = p.softcap * softcap_tanh(s[i] * p.softcap_in);
  }
  const int n0 = (w.nb_begin + it) * kBlockN;
  if (partial_block(w, n0, w.sk)) {
    mask_block(s3, p, row0, n0 + mask_col(static_cast<int>(threadIdx.x) % 4), w.sq, w.sk);
  }
  // m, l, P = exp2(S·score_log2 − m·score_log2), O rescaled.
  softmax.step(s3, o3, p.score_log2);
  pack_p_frag(s3, p_frag);
}

// The blocks of the other warpgroups are waited for before their arrivals, in block order, so
// no arrival depends on a later block: the ring runs as in the computing schedules.
template <int D, int BM, int BN, int S, bool Ov, bool Pp, bool Vl, bool Bf16, bool Ug, bool Ns, int Ru, bool Sp, int Tl, int Ps>
__device__ __forceinline__ void FwdKernel<D, BM, BN, S, Ov, Pp, Vl, Bf16, Ug, Ns, Ru, Sp, Tl, Ps>::consumer_split(
    const Params& params, int group, const Smem& sm, const Barriers& b, const TileWork& w, int kv_base, int round,
    float (&s)[kNT * 4]) {
  const sm80::FwdParams& p = params.prob;
  const int tid = static_cast<int>(threadIdx.x) % kWarpGroupThreads;
  const int lane = tid % 32;
  const int row0 = w.m0 + 16 * (tid / 32) + lane / 4;  // the first slice's rows, in every warpgroup

  if constexpr (kNextS) {  // this round's S_0: the first warpgroup's first block; the others' is dropped
    ptx::warpgroup_wait<0>();
    ptx::warpgroup_fence_operand(s);
  }
  float acc_o[kOT * 4];
#pragma unroll
  for (int i = 0; i < kOT * 4; ++i) acc_o[i] = 0.f;
  auto& o3 = reinterpret_cast<float(&)[1][kOT][4]>(acc_o);
  OnlineSoftmax<1> softmax;
  softmax.init();
  for (int it = 0; it < w.n_blocks; ++it) {
    const int stage = stage_of(kv_base + it);
    const uint32_t phase = phase_of(kv_base + it);
    b.k_full(stage).wait(phase);
    if (it % kConsumerGroups != group) {  // another warpgroup's block
      if (stage_arriver(lane)) b.k_empty(stage).arrive();
      b.v_full(stage).wait(phase);
      if (stage_arriver(lane)) b.v_empty(stage).arrive();
      continue;
    }
    if (!kNextS || it > 0) {
      ptx::warpgroup_fence_operand(s);
      ptx::warpgroup_fence();
      issue_s(sm, 0, w.q_stage, sm.k + stage * kKVBytes, s);
      ptx::warpgroup_commit();
      ptx::warpgroup_wait<0>();
      ptx::warpgroup_fence_operand(s);
    }
    if (stage_arriver(lane)) b.k_empty(stage).arrive();
    uint32_t p_frag[kBlockN / 16][4];
    scores_to_p(p, w, it, row0, s, softmax, o3, p_frag);
    b.v_full(stage).wait(phase);
    const uint32_t v_base = sm.v + stage * kKVBytes;
    ptx::warpgroup_fence_operand(acc_o);
    ptx::warpgroup_fence();
    issue_pv(v_base, p_frag, acc_o, false);
    ptx::warpgroup_commit();
    ptx::warpgroup_wait<0>();
    ptx::warpgroup_fence_operand(acc_o);
    if (stage_arriver(lane)) b.v_empty(stage).arrive();
  }
  // Q read by every GEMM of this tile; with O staged in the Q buffer the first warpgroup's store
  // releases it instead.
  if (group > 0 || q_freed_at_last_qk(params)) b.q_empty(w.q_stage).arrive();
  combine_split(sm, group, p.score_log2, softmax, acc_o);
  if constexpr (kNextS) {
    const uint32_t next_k = round_s_keys(sm, b, round + 1, kv_base + w.n_blocks);
    ptx::warpgroup_fence_operand(s);
    wait_turn(group);
    ptx::warpgroup_fence();
    issue_s(sm, group, (round + 1) % kQStages, next_k, s);
    ptx::warpgroup_commit();
    pass_turn(group);
  }
  if (group == 0) store_tile(params, group, sm, b, w, round, softmax, o3);
}

// Every warpgroup holds the same rows in the same registers (the first slice), so the combination
// is element by element: M = max over the warpgroups of m; l = sum of l·exp2((m − M)·c) (each
// lane's partial sum, quad-reduced later in finish()); O = sum of O·exp2((m − M)·c). A row no
// warpgroup saw a key of keeps M = −inf and l = 0.
template <int D, int BM, int BN, int S, bool Ov, bool Pp, bool Vl, bool Bf16, bool Ug, bool Ns, int Ru, bool Sp, int Tl, int Ps>
__device__ __forceinline__ void FwdKernel<D, BM, BN, S, Ov, Pp, Vl, Bf16, Ug, Ns, Ru, Sp, Tl, Ps>::combine_split(
    const Smem& sm, int group, float score_log2, OnlineSoftmax<1>& softmax, float (&acc_o)[kOT * 4]) {
  const int tid = static_cast<int>(threadIdx.x) % kWarpGroupThreads;
  float* buf = reinterpret_cast<float*>(sm.base + kSplitOffset);
  // Value v of warpgroup g > 0, thread tid.
  const auto at = [&](int g, int v) -> float& {
    return buf[((g - 1) * kSplitValues + v) * kWarpGroupThreads + tid];
  };
  if (group > 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      at(group, h) = softmax.row_max[0][h];
      at(group, 2 + h) = softmax.row_sum[0][h];
    }
#pragma unroll
    for (int i = 0; i < kOT * 4; ++i) at(group, 4 + i) = acc_o[i];
  }
  ptx::named_barrier_sync(kSplitBarrier, kConsumerGroups * kWarpGroupThreads);
  if (group == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float m = softmax.row_max[0][h];
#pragma unroll
      for (int g = 1; g < kConsumerGroups; ++g) m = fmaxf(m, at(g, h));
      const float m_scaled = m == -INFINITY ? 0.f : m * score_log2;
      const float f0 = ptx::ex2_approx(softmax.row_max[0][h] * score_log2 - m_scaled);
      float l = softmax.row_sum[0][h] * f0;
#pragma unroll
      for (int ot = 0; ot < kOT; ++ot) {
        acc_o[4 * ot + 2 * h] *= f0;
        acc_o[4 * ot + 2 * h + 1] *= f0;
      }
#pragma unroll
      for (int g = 1; g < kConsumerGroups; ++g) {
        const float f = ptx::ex2_approx(at(g, h) * score_log2 - m_scaled);
        l = fmaf(at(g, 2 + h), f, l);
#pragma unroll
        for (int ot = 0; ot < kOT; ++ot) {
          acc_o[4 * ot + 2 * h] = fmaf(at(g, 4 + 4 * ot + 2 * h), f, acc_o[4 * ot + 2 * h]);
          acc_o[4 * ot + 2 * h + 1] = fmaf(at(g, 4 + 4 * ot + 2 * h + 1), f, acc_o[4 * ot + 2 * h + 1]);
        }
      }
      softmax.row_max[0][h] = m;
      softmax.row_sum[0][h] = l;
    }
  }
  ptx::named_barrier_sync(kSplitBarrier, kConsumerGroups * kWarpGroupThreads);  // read before a later split writes it
}

// The turns match the computing schedules': overlapped, one a block from the second (from the
// first without kNextS) and one for the last P·V (with kNextS also when there is no key, the turn
// that issues the next S_0); the v1 schedule, two a block. Each turn comes before the block's
// waits, so an idle warpgroup holds no turn while it waits for a load. The waits keep the
// arrivals in the right phase: a stage's k_full / v_full of block it completes only after its
// empty barrier's phase of block it - kStages did.
template <int D, int BM, int BN, int S, bool Ov, bool Pp, bool Vl, bool Bf16, bool Ug, bool Ns, int Ru, bool Sp, int Tl, int Ps>
__device__ __forceinline__ void FwdKernel<D, BM, BN, S, Ov, Pp, Vl, Bf16, Ug, Ns, Ru, Sp, Tl, Ps>::consumer_idle(
    const Smem& sm, int group, const Barriers& b, const TileWork& w, int kv_base, int round, float (&s)[kNT * 4]) {
  const bool lane0 = threadIdx.x % 32 == 0;
  const int n_blocks = w.n_blocks;
  if constexpr (kNextS) {  // this round's S_0 read the Q buffer: let it land before releasing it
    ptx::warpgroup_wait<0>();
    ptx::warpgroup_fence_operand(s);
  }
  b.q_empty(w.q_stage).arrive();
  for (int it = 0; it < n_blocks; ++it) {
    if (!kOverlap || it > 0 || !kNextS) {
      wait_turn(group);
      pass_turn(group);
    }
    if (!kOverlap) {
      wait_turn(group);
      pass_turn(group);
    }
    const int st = stage_of(kv_base + it);
    const uint32_t ph = phase_of(kv_base + it);
    b.k_full(st).wait(ph);
    if (lane0) b.k_empty(st).arrive();
    b.v_full(st).wait(ph);
    if (lane0) b.v_empty(st).arrive();
  }
  if constexpr (kNextS) {
    const uint32_t next_k = round_s_keys(sm, b, round + 1, kv_base + n_blocks);
    ptx::warpgroup_fence_operand(s);
    wait_turn(group);
    ptx::warpgroup_fence();
    issue_s(sm, group, (round + 1) % kQStages, next_k, s);
    ptx::warpgroup_commit();
    pass_turn(group);
  } else if (kOverlap && n_blocks > 0) {
    wait_turn(group);
    pass_turn(group);
  }
}

template <int D, int BM, int BN, int S, bool Ov, bool Pp, bool Vl, bool Bf16, bool Ug, bool Ns, int Ru, bool Sp, int Tl, int Ps>
__device__ __forceinline__ void FwdKernel<D, BM, BN, S, Ov, Pp, Vl, Bf16, Ug, Ns, Ru, Sp, Tl, Ps>::issue_pv(
    uint32_t v_base, const uint32_t (&p_frag)[kBlockN / 16][4], float (&acc_o)[kOT * 4], bool first) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk) {
    const uint64_t db = ptx::make_smem_desc_sw128(v_base, kk * 16 * kRowBytes, kKVPanelBytes, 1024);
    ptx::warpgroup_mma_rs<kHeadDim, kIsBf16, 1>(acc_o, p_frag[kk], db, first && kk == 0 ? 0 : 1);
  }
}

template <int D, int BM, int BN, int S, bool Ov, bool Pp, bool Vl, bool Bf16, bool Ug, bool Ns, int Ru, bool Sp, int Tl, int Ps>
__device__ __forceinline__ void FwdKernel<D, BM, BN, S, Ov, Pp, Vl, Bf16, Ug, Ns, Ru, Sp, Tl, Ps>::issue_s(const Smem& sm, int group,
                                                                               int q_stage, uint32_t k_base,
                                                                               float (&s)[kNT * 4]) {
  // Q of this warpgroup: rows 64·group.. of every panel (K-major, 1024-byte stride between
  // 8-row groups).
  const uint32_t q_base = sm.q + q_stage * kQBytes + 64 * group * kRowBytes;
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    const int panel = kk / 4;
    const int step = (kk % 4) * 32;
    const uint64_t da = ptx::make_smem_desc_sw128(q_base, panel * kQPanelBytes + step, 16, 1024);
    const uint64_t db = ptx::make_smem_desc_sw128(k_base, panel * kKVPanelBytes + step, 16, 1024);
    ptx::warpgroup_mma_ss<kBlockN, kIsBf16, 0>(s, da, db, kk > 0 ? 1 : 0);
  }
}

template <int D, int BM, int BN, int S, bool Ov, bool Pp, bool Vl, bool Bf16, bool Ug, bool Ns, int Ru, bool Sp, int Tl, int Ps>
__device__ __forceinline__ uint32_t FwdKernel<D, BM, BN, S, Ov, Pp, Vl, Bf16, Ug, Ns, Ru, Sp, Tl, Ps>::round_s_keys(const Smem& sm,
                                                                                        const Barriers& b,
                                                                                        int round, int kv) {
  const int qs = round % kQStages;
  b.q_full(qs).wait((round / kQStages) & 1);
  if (sm.work[qs].n_blocks <= 0) return sm.q + qs * kQBytes;  // no tile, or no key: the stand-in
  b.k_full(stage_of(kv)).wait(phase_of(kv));
  return sm.k + stage_of(kv) * kKVBytes;
}

}  // namespace fa::cuda::sm90
