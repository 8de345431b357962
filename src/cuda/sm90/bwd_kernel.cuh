// CUDA backend, sm90/: the FlashAttention-3-design backward main kernel class (TMA, mbarriers,
// wgmma, warp specialisation with setmaxnreg). A persistent grid: each CTA takes tiles (kv block,
// kv head, batch) one after another, the first blockIdx.x, the next ones drawn from a counter
// by its producer warp, which hands each tile's steps to the other warps through shared memory.
// Per tile K and V stay in shared memory; warp 0 of warpgroup 0 streams (query head, q block)
// steps of Q, dO, LSE and D through a kStages ring that runs on over the tiles; warpgroups 1
// and 2 each own 64 kv rows:
//   Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ (wgmma, both operands in shared memory),
//   Pᵀ = exp(Sᵀ − LSE), dSᵀ = Pᵀ∘(dPᵀ − D) in registers,
//   dV += Pᵀ·dO, dK += dSᵀ·Q (wgmma, A from registers), dS staged by stmatrix.trans,
//   dQ = dS·K (wgmma from shared memory; 80-row q blocks: dQᵀ = Kᵀ·dSᵀ) stored to a shared
//   fp32 tile;
// warp 1 of warpgroup 0 adds each dQ tile into the fp32 accumulator by bulk tensor reductions
// (cp.reduce.async.bulk.tensor), in descending kv-block order in the deterministic mode. Head
// dim 256 runs the split-D schedule instead (consumer_split_d), its dQ tile written into the
// step's own Q and dO buffers once read, which the writer releases. dK and dV leave by TMA
// stores from shared memory (store_dkdv_tma), staged over the dS buffers and the dQ tile, so
// that the next tile's K and V load meanwhile (split-D: over K and V, which then wait).
// Receives validated BwdParams; does not choose tile sizes, lay out the workspace or launch.
#pragma once

#include <cuda/ptx>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common/convert.cuh"
#include "cuda/common/softmax.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/math.cuh"
#include "cuda/ptx/named_barrier.cuh"
#include "cuda/ptx/red.cuh"
#include "cuda/ptx/setmaxnreg.cuh"
#include "cuda/ptx/stmatrix.cuh"
#include "cuda/ptx/thread_index.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/sm90/bwd_order.h"
#include "cuda/sm90/bwd_params.h"
#include "cuda/sm90/fwd_kernel.cuh"  // SmemBarrier, WarpGroupRole

namespace fa::cuda::sm90 {

// Named barriers (id 0 is __syncthreads): ds_ready between the two consumer warpgroups;
// dq_full (consumers arrive, the dQ writer waits) and dq_empty (the writer arrives, the
// consumers wait) around the shared dQ tile.
// Split-D (consumer_split_d): ds_ready after both warpgroups staged Pᵀ and dSᵀ (its dQ tile is
// handed over by an mbarrier per stage instead: see kNumBarriers). The epilogue (epilogue):
// kv_free (every consumer's last GEMMs landed: K, V and the dS buffers have no reader left, and
// again once both warpgroups' dK and dV were read from shared memory), dkdv_staged + warpgroup
// (its 128 threads wrote their dK and dV tiles).
enum class BwdBarrier { ds_ready = 1, dq_full = 2, dq_empty = 3, kv_free = 4, dkdv_staged = 5 };

// threadIdx.x, read anew where called (ptx::thread_index_anew): what the consumers derive from it
// (fragment and stmatrix addresses) is then computed per tile, not hoisted out of the tile loop
// and held, or spilled, across the epilogue, where dK and dV take the registers.
__device__ __forceinline__ int thread_index_per_tile() { return ptx::thread_index_anew(); }

template <int kHeadDim_, int kBlockN_, int kBlockM_, int kStages_, bool kDkAcrossSteps_, bool kIsBf16_,
          bool kDqArriveLate_, int kPasses_>
struct BwdKernel {
  using Params = BwdParams;
  using T = typename Storage<kIsBf16_>::type;

  static constexpr bool kIsBf16 = kIsBf16_;
  static constexpr int kHeadDim = kHeadDim_;  // compiled D (and Dv); smaller ones zero-fill
  static constexpr int kBlockN = kBlockN_;    // kv rows per CTA (stationary)
  static constexpr int kBlockM = kBlockM_;    // q rows per streamed step
  static constexpr int kStages = kStages_;
  // The dK GEMM of step s runs on under the dQ store and step s + 1's Sᵀ/dPᵀ GEMMs (waited
  // there), else it is waited at the end of step s, after the dQ store it runs under (when Sᵀ,
  // dPᵀ and the dSᵀ fragments do not fit beside dK and dV in the registers).
  static constexpr bool kDkAcrossSteps = kDkAcrossSteps_;
  // The dQ tile's proxy fence and dq_full arrival come in the next step, once its Sᵀ has landed
  // (the stores are complete by then, so the fence does not wait for them), else right after
  // the stores (BwdConfig).
  static constexpr bool kDqArriveLate = kDqArriveLate_;
  // The passes over the scores compiled in (common/mask.cuh): the softcap pass and any mask
  // (kPassesAll), or on the rows and instantiations of one mask (bwd_launch), the causal mask as
  // a constant (kPassesCausal) or none (kPassesDense). Unmasked problems (no mask, no softcap,
  // dense; bwd_can_implement declines the rest on such a row) need no element mask at all:
  // K and V are zero-filled, so the Sᵀ, dPᵀ of entries past the keys are 0 and P, dS finite, and
  // they reach only the dK and dV rows past the keys (never stored) and dQ through zero K rows;
  // rows past the queries have P = 0 (their LSE reads +inf).
  static constexpr int kPasses = kPasses_;
  static constexpr bool kUnmasked = kPasses == kPassesDense;
  // Leading idle steps skipped (consumer): on the causal instantiation with 64-row q blocks
  // against 128-key tiles, whose first q block lies wholly below the second warpgroup's keys.
  // Elsewhere they are rare, and the loop cost the 80-row row and the general instantiation
  // consumer spills (docs/PERF.md).
  static constexpr bool kIdleSteps = kPasses == kPassesCausal && kBlockM == 64 && kBlockN == 128;
  // A consumer barrier (ds_ready, dq_empty) of the step loop. With kIdleSteps one warpgroup may
  // meet it from the idle loop while the other is in the step loop: different instructions, so
  // the unaligned form (compute-sanitizer's synccheck flags bar.sync there).
  __device__ __forceinline__ static void consumer_sync(BwdBarrier id, int count) {
    if constexpr (kIdleSteps) {
      ptx::named_barrier_sync_unaligned(static_cast<int>(id), count);
    } else {
      ptx::named_barrier_sync(static_cast<int>(id), count);
    }
  }
  // The problem's mask, or the one mask of the instantiation as a constant.
  __host__ __device__ __forceinline__ static fa::Mask mask_of(const sm80::BwdParams& p) {
    if constexpr (kPasses == kPassesAll) {
      return p.mask;
    } else {
      return fixed_mask<kPasses>();
    }
  }
  // Split-D (kBlockN = 64, head dim 256): both consumer warpgroups own all 64 kv rows and split
  // the head dim, dK/dV/dQ columns 128·group .. +127 (128 + 64 fp32 a thread, not 256), and the
  // q columns of Sᵀ/dPᵀ; Pᵀ and dSᵀ go through shared memory to the other warpgroup's GEMMs.
  // No room is left for an fp32 dQ tile beside two Q/dO stages: once its dV and dK have read
  // the step's Q and dO, each warpgroup writes its 64 x 128 dQ (32 KiB) over its own columns of
  // them (Q and dO columns 128·group .. +127, 16 KiB each), and the writer warp adds it and
  // releases the stage (dq_panel_offset). consumer_split_d.
  static constexpr bool kSplitD = kBlockN_ == 64;
  // The rotated q-block order for unmasked problems (RotatedQOrder): 0 never, 1 in the ordered
  // reduction and with claims (rotated_order), 2 always (FA_SM90_BWD_ROTATE, for timing them
  // against each other).
#ifdef FA_SM90_BWD_ROTATE
  static constexpr int kRotatedOrder = FA_SM90_BWD_ROTATE;
#else
  static constexpr int kRotatedOrder = 1;
#endif

  // Warp roles: one producer warpgroup (warp 0 loads, warp 1 writes dQ), two consumer
  // warpgroups of 64 kv rows.
  static constexpr int kWarpGroupThreads = 128;
  static constexpr int kConsumerGroups = 2;
  static constexpr int kConsumerThreads = kWarpGroupThreads * kConsumerGroups;
  static constexpr int kThreads = kWarpGroupThreads * (1 + kConsumerGroups);
  static constexpr int kMinBlocks = 1;  // the register cap setmaxnreg needs at entry
  static constexpr int kConsumerWarps = 4 * kConsumerGroups;
  static constexpr int kDqSyncThreads = kConsumerThreads + 32;  // dq_full / dq_empty: + the writer
  // setmaxnreg moves registers within the CTA's launch allocation: 168 a thread (65536 / 384,
  // rounded down to a multiple of 8), 64512. 128·24 (producer) + 256·240 (consumers) = 64512;
  // split-D 128·40 + 256·232 = 64512: its consumers (dK, dV and dQ halves) fit in 232, and the
  // producer warpgroup takes the rest; the producer warp's tile decode and step loop spill a
  // third as much at 32 as at 24 (+1–7% at hdim 256, most on causal problems) and a third again
  // at 40 (+0–1.5%); at 64 and 128, consumers at 232 lost up to 15% (docs/PERF.md).
  static constexpr int kProducerRegs = kSplitD ? 40 : 24;
  static constexpr int kConsumerRegs = kSplitD ? 232 : 240;
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static_assert(kWarpGroupThreads * (kProducerRegs + kConsumerGroups * kConsumerRegs) <= kThreads * kLaunchRegs,
                "register file");

  // Shared memory: 128-byte-swizzled panels of 64 columns (128 bytes a row), every panel
  // 1024-byte aligned. K, V: kPanels panels of kBlockN rows. Each Q and dO stage: kPanels panels
  // of kBlockM rows. dS [q][kv] (2 buffers, step parity): kBlockN / 64 panels of kBlockM rows,
  // panel w written by consumer warpgroup w. dQ fp32 [q][d]: kHeadDim / 32 panels of kBlockM
  // rows of 32 floats (128 bytes), 128-byte swizzled (the dQ accumulator map's box). Then
  // LSE·log2e and D per stage, then the mbarriers.
  static constexpr int kPanelCols = 64;
  static constexpr int kPanels = kHeadDim / kPanelCols;
  static constexpr int kRowBytes = kPanelCols * 2;  // 128
  static constexpr int kKVPanelBytes = kBlockN * kRowBytes;
  static constexpr int kKVBytes = kPanels * kKVPanelBytes;
  static constexpr int kQPanelBytes = kBlockM * kRowBytes;
  static constexpr int kQBytes = kPanels * kQPanelBytes;
  static constexpr int kDSPanelBytes = kBlockM * kRowBytes;
  // Split-D: Pᵀ then dSᵀ [kv][q] (one panel of kBlockN rows each) per buffer.
  static constexpr int kDSBytes = kSplitD ? 2 * kBlockN * kRowBytes : (kBlockN / kPanelCols) * kDSPanelBytes;
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + kKVBytes;
  static constexpr int kOffQ = kOffV + kKVBytes;
  static constexpr int kOffDO = kOffQ + kStages * kQBytes;
  static constexpr int kOffDS = kOffDO + kStages * kQBytes;
  static constexpr int kDqPanelCols = 32;
  static constexpr int kDqPanels = kHeadDim / kDqPanelCols;
  static constexpr int kDqPanelBytes = kBlockM * kRowBytes;
  static constexpr int kOffDQ = kOffDS + 2 * kDSBytes;
  // The epilogue's dK and dV tiles (16-bit, K and V's layout; store_dkdv_tma): split-D over K and
  // V (the next tile's K and V then load after them); else not over K and V, so that the next
  // tile's K and V load under the epilogue: dK over the dS buffers, free once the tile's GEMMs
  // landed, and dV after it where the buffers hold both (hdim 64), else (kDvOverDq, hdim 128)
  // over the dQ tile once the writer has read the tile's last one (the epilogue takes that
  // dq_empty; a region of its own, 32 KiB more, measured the same).
  static constexpr bool kDvOverDS = !kSplitD && 2 * kKVBytes <= 2 * kDSBytes;
  static constexpr bool kDvOverDq = !kSplitD && !kDvOverDS;
  static constexpr int kOffDk = kSplitD ? kOffK : kOffDS;
  static constexpr int kOffDv = kSplitD ? kOffV : kDvOverDS ? kOffDS + kKVBytes : kOffDQ;
  static constexpr int kOffLse = kOffDQ + (kSplitD ? 0 : kDqPanels * kDqPanelBytes);
  static constexpr int kOffDsum = kOffLse + kStages * kBlockM * 4;
  // The producer's hand-over of a tile: two slots of 64 bytes (a Steps each), by tile parity.
  static constexpr int kWorkSlotBytes = 64;
  static constexpr int kOffWork = kOffDsum + kStages * kBlockM * 4;
  static constexpr int kOffBars = kOffWork + 2 * kWorkSlotBytes;
  // mbarriers: kv_full (K, V of the tile loaded), full[s] and empty[s] (the ring), split-D
  // dq_full[s] (its dQ tile in stage s is written), kv_empty (K and V free for the next tile),
  // tile_full[2] and tile_empty[2] (the work slots).
  static constexpr int kBarKvFull = 0;
  static constexpr int kBarFull = 1;
  static constexpr int kBarEmpty = kBarFull + kStages;
  static constexpr int kBarDqFull = kBarEmpty + kStages;
  static constexpr int kBarKvEmpty = kBarDqFull + (kSplitD ? kStages : 0);
  static constexpr int kBarTileFull = kBarKvEmpty + 1;
  static constexpr int kBarTileEmpty = kBarTileFull + 2;
  static constexpr int kNumBarriers = kBarTileEmpty + 2;
  static constexpr int kAlign = 1024;                    // swizzle atom
  static constexpr int kSmemBytes = kAlign + kOffBars + 8 * kNumBarriers;

  // The epilogue by TMA stores: each consumer warpgroup's dK and dV (64 kv rows; split-D: its
  // half of the columns) are staged at kOffDk, kOffDv, then go out in boxes of 64 rows x 64
  // columns.
  static constexpr int kDkdvStoreRows = 64;

  static constexpr int kNT = kBlockM / 8;    // n8 chunks of Sᵀ / dPᵀ (q columns)
  static constexpr int kKT = kBlockM / 16;   // k16 steps of dV / dK (over q)
  static constexpr int kDT = kHeadDim / 8;   // n8 chunks of dK / dV
  // dQ = dS·K split between the consumer warpgroups: by q rows when kBlockM = 128 (each
  // warpgroup 64 rows x kHeadDim), else by columns (64 rows x kHeadDim / 2). A q block that is
  // no multiple of 64 rows (80: no m64 extent) runs it transposed, dQᵀ = Kᵀ·dSᵀ, each warpgroup
  // kHeadDim / 2 = 64 rows of d x kBlockM, into the plain accumulator layout (store_dq_transposed).
  static constexpr bool kDqTransposed = kBlockM % 64 != 0;
  // The causal 80-row kernel reads threadIdx anew where it needs the lane's dS row or kv row in
  // the step loop (stage_ds, the masked pass): held across the loop, ptxas kept them in local
  // memory (docs/PERF.md).
  static constexpr bool kLaneAnew = kDqTransposed && kPasses == kPassesCausal;
  static_assert(!(kLaneAnew && kSplitD), "kLaneAnew derives the kv row of consumer's layout");
  static constexpr bool kDqSplitRows = kBlockM == 64 * kConsumerGroups;
  static constexpr int kDqN = kDqSplitRows ? kHeadDim : kHeadDim / kConsumerGroups;  // transposed: its m
  static constexpr int kDqAccum = kDqTransposed ? kBlockM / 2 : kDqN / 2;             // fp32 a thread
  // Split-D: dQ panel c (32 fp32 columns x kBlockM rows, 8 KiB = one 64-column bf16 panel of a
  // Q or dO stage) of stage `stage`. Warpgroup w's columns 128w .. +127 are panels 4w .. 4w + 3:
  // the first two over Q's panels 2w, 2w + 1, the other two over dO's (only w reads those after
  // ds_ready).
  __host__ __device__ static constexpr int dq_panel_offset(int stage, int c) {
    return ((c % 4) < 2 ? kOffQ : kOffDO) + stage * kQBytes + (2 * (c / 4) + c % 2) * kQPanelBytes;
  }
  // Every split-D dQ panel of a stage is whole, 1024-byte aligned (the swizzle atom), and lies in
  // one of its warpgroup's own Q or dO panels; no two share one.
  static constexpr bool dq_panels_in_own_columns() {
    bool ok = kDqPanelBytes == kQPanelBytes && kDqPanels == 4 * kConsumerGroups;
    for (int stage = 0; stage < kStages; ++stage)
      for (int c = 0; c < kDqPanels; ++c) {
        const int off = dq_panel_offset(stage, c), w = c / 4;
        bool own = false;
        for (int base : {kOffQ, kOffDO})
          for (int p = 2 * w; p < 2 * w + 2; ++p) own = own || off == base + stage * kQBytes + p * kQPanelBytes;
        ok = ok && own && off % kAlign == 0;
        for (int c2 = 0; c2 < c; ++c2) ok = ok && dq_panel_offset(stage, c2) != off;
      }
    return ok;
  }

  static_assert(kHeadDim % kPanelCols == 0, "head dim a multiple of 64");
  static_assert(kBlockN == 64 * kConsumerGroups || (kSplitD && kBlockM == 64 && kHeadDim % 128 == 0),
                "64 kv rows per consumer warpgroup, or split-D (64 x 64 blocks, head dim halves of panels)");
  static_assert(kBlockM == 64 || kDqSplitRows || (kDqTransposed && !kSplitD && kDqN == 64 && kBlockM % 16 == 0),
                "q block of 64 or 128 rows, or of a multiple of 16 rows with the dQ GEMM transposed over two 64-column halves");
  static_assert(kSplitD || kDqN % kPanelCols == 0, "dQ column slice of whole panels");
  static_assert(kOffBars % 8 == 0 && kOffDS % kAlign == 0 && kOffDQ % kAlign == 0, "alignment");
  static_assert(!kSplitD || dq_panels_in_own_columns(), "split-D dQ panels over the warpgroup's own Q/dO panels");
  static_assert(kSplitD || kKVBytes <= 2 * kDSBytes, "dK staged over the dS buffers");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
  static_assert(kOffWork % 16 == 0, "work slots");

  static constexpr int smem_bytes() { return kSmemBytes; }
  static dim3 block() { return dim3(kThreads); }
  // Head tiles (BwdParams::head_tiles) come with a causal-like mask only, so never to the unmasked
  // instantiation, which then compiles none of their code (bwd_launch refuses the pairing).
  __host__ __device__ __forceinline__ static bool head_tiles(const sm80::BwdParams& p) {
    return !kUnmasked && p.head_tiles != 0;
  }
  // One tile per (kv block, kv head, batch), or with head tiles per (kv block, query head,
  // batch), kv block fastest (the order: decode); a CTA per multiprocessor, or per tile when
  // there are fewer.
  __host__ __device__ static int64_t num_tiles_of(const sm80::BwdParams& p) {
    return int64_t(p.num_kv_blocks) * (head_tiles(p) ? p.heads_q : p.heads_kv) * p.batch;
  }
  // The rotated q-block order (RotatedQOrder) where every kv block sees every q block, in the
  // ordered reduction and with claims (the kv blocks of a head then reach a q block one after
  // another, not all in the same step, so a claim's store is seldom waited on). In the
  // ordered reduction a kv block then waits on lower kv blocks of its head too, which come
  // after it: the tiles of a head must all run at once, so there the tiles are dealt out in
  // rounds of whole heads (a CTA's next tile is its current one + gridDim.x, gridDim.x a
  // multiple of the kv blocks) instead of drawn, where a CTA holding its next tile could hold
  // one its current tile waits on; the launch is cooperative, so that the whole grid is resident
  // (bwd_launch: refused, the descending order).
  static bool rotated_order(const sm80::BwdParams& p, int sm_count) {
    if (kRotatedOrder == 0 || !p.mask.none() || !RotatedQOrder::fits(p.num_q_blocks, p.num_kv_blocks)) return false;
    if (p.locks != nullptr) return p.num_kv_blocks <= sm_count;
    return kRotatedOrder == 2 || p.claims != nullptr;
  }
  // Are the tiles dealt in rounds of whole heads (the rotated order in the deterministic mode)?
  __host__ __device__ static bool dealt_rounds(const Params& p) { return p.rotated != 0 && p.prob.locks != nullptr; }
  static dim3 grid(const Params& p, int sm_count) {
    const int64_t tiles = num_tiles_of(p.prob);
    const int ctas = dealt_rounds(p) ? sm_count / p.prob.num_kv_blocks * p.prob.num_kv_blocks : sm_count;
    return dim3(static_cast<unsigned>(tiles < ctas ? tiles : ctas));
  }

  __device__ __forceinline__ void operator()(const Params& p, char* smem) const;

 private:
  // First row r in [0, sq) with pred(r) true for a predicate monotone in r (sq if none).
  template <class Pred>
  __device__ __forceinline__ static int first_row(int sq, Pred pred) {
    int lo = 0, hi = sq;
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (pred(mid)) hi = mid; else lo = mid + 1;
    }
    return lo;
  }

  // A tile's block and its steps. sq, sk: the batch's sequence lengths; q_first, k_first: its
  // first packed row (varlen) or 0; map_b: the batch coordinate of the tensor maps (0 with
  // varlen: one packed batch). kv_block < 0: no tile left (the producer's last hand-over).
  // The steps go head by head, the group's query heads of kv head h (or with head tiles query
  // head h alone), the q blocks ascending from qb_first; in RotatedQOrder (params.rotated)
  // qb_first is the kv block's first q block and n_qb all the batch's, so the order wraps past
  // the last.
  struct Steps {
    int kv_block, h, b, kv0, kv_rows, qb_first, n_qb, steps;
    int sq, sk, q_first, k_first, map_b;
  };
  // The query head of step s of the tile, and the tile's kv head (computed where needed, once a
  // tile: a field of its own stays live over the consumers' step loop, where hdim 128 has no
  // register to spare).
  __device__ __forceinline__ static int step_head(const sm80::BwdParams& p, const Steps& w, int s) {
    return (head_tiles(p) ? w.h : w.h * p.group) + s / w.n_qb;
  }
  __device__ __forceinline__ static int kv_head(const sm80::BwdParams& p, const Steps& w) {
    return head_tiles(p) ? w.h / p.group : w.h;
  }
  // The q block of step s of the tile: RotatedQOrder::qb_of_step
  // where it wraps (past sq); a masked tile's q blocks all lie below sq (no extra registers in
  // the producer warp, which has 24).
  __device__ __forceinline__ static int step_qb(const Steps& w, int s) {
    const int qb = w.qb_first + s % w.n_qb;
    return qb * kBlockM < w.sq ? qb : qb - w.n_qb;
  }
  static_assert(sizeof(Steps) <= kWorkSlotBytes, "a tile's hand-over fits its slot");
  // Tile idx's block and steps; false when the block starts past its batch's keys (varlen).
  // Tile numbers are below 2^30 (can_implement), drawn ones below 2^30 + 2 · gridDim.x.
  __device__ __forceinline__ static bool decode(const sm80::BwdParams& p, bool rotate, int idx, Steps& w);
  // The hand-over of this CTA's tile number `tile` (its producer's `tile`-th), for the consumers
  // and the dQ writer: waits for the slot, copies it, releases it.
  __device__ __forceinline__ static Steps take_tile(char* smem, uint64_t* bars, int tile) {
    SmemBarrier{bars + kBarTileFull + (tile & 1)}.wait((tile >> 1) & 1);
    const Steps w = reinterpret_cast<const Steps*>(smem + kOffWork + (tile & 1) * kWorkSlotBytes)[0];
    SmemBarrier{bars + kBarTileEmpty + (tile & 1)}.arrive();
    return w;
  }
  // Row of (query head h, query 0 of the batch) in LSE and D ([B, Hq, Sq], varlen [Hq, total_q]).
  __device__ __forceinline__ static int64_t stat_row(const sm80::BwdParams& p, const Steps& w, int h) {
    return p.cu_seqlens_q != nullptr ? int64_t(h) * p.total_q + w.q_first : (int64_t(w.b) * p.heads_q + h) * w.sq;
  }
  // Deterministic mode: the number of dQ tiles added to the q block at q0 before this CTA's: the
  // kv blocks that see it are contiguous up to the one holding its last row's last key, and add
  // in descending order; rotate: RotatedQOrder's turn (every kv block of the batch sees it).
  __device__ __forceinline__ static int dq_turn(const sm80::BwdParams& p, bool rotate, const Steps& w, int q0) {
    if (rotate) return RotatedQOrder::turn(q0 / kBlockM, w.kv_block, w.n_qb, (w.sk + kBlockN - 1) / kBlockN);
    const int q_last = min(q0 + kBlockM, w.sq) - 1;
    return static_cast<int>((p.mask.key_end(q_last, w.sq, w.sk) - 1) / kBlockN) - w.kv_block;
  }
  // A claim counter (params.claims) counts the writers that reached its block, and gains this bit
  // once the first one's stored tile is complete (dq_writer). A block has fewer claims than
  // tiles (below 2^30, can_implement).
  static constexpr int kClaimPublished = 1 << 30;
  // A consumer thread's release of a Q/dO stage: every consumer thread arrives (256 a phase), so
  // that each one's reads of the stage's LSE and D come before the producer rewrites them (one
  // arrival a warp after __syncwarp measured the same, but racecheck does not see that order).
  __device__ __forceinline__ static void release_stage(uint64_t* bars, int stage) {
    SmemBarrier{bars + kBarEmpty + stage}.arrive();
  }
  // warpgroup:: scope. The dQ tile this thread stored is complete: generic-proxy writes, read by
  // the bulk reduction (async proxy), so the fence comes before the arrival.
  __device__ __forceinline__ static void dq_tile_ready() {
    ::cuda::ptx::fence_proxy_async(::cuda::ptx::space_shared);
    ptx::named_barrier_arrive(static_cast<int>(BwdBarrier::dq_full), kDqSyncThreads);
  }
  // Row of (query head h, query 0 of the batch) in dQ_accum [Hq, rows_q, dq_accum_pitch].
  __device__ __forceinline__ static int64_t dq_row(const sm80::BwdParams& p, const Steps& w, int h) {
    return int64_t(h) * p.rows_q + (p.cu_seqlens_q != nullptr ? w.q_first : int64_t(w.b) * w.sq);
  }

  __device__ __forceinline__ static void producer(const Params& params, char* smem, uint64_t* bars);
  __device__ __forceinline__ static void dq_writer(const Params& params, char* smem, uint64_t* bars);
  // One tile of a consumer warpgroup: `tile` counts this CTA's tiles (the K/V barriers' parity),
  // `ring` the steps before it (the ring's stages and parities).
  __device__ __forceinline__ static void consumer_split_d(const Params& params, uint32_t smem_base, char* smem,
                                                          uint64_t* bars, const Steps& w, int tile, uint32_t ring);
  template <int kN>
  __device__ __forceinline__ static void store_dkdv(const sm80::BwdParams& p, const Steps& w, const float (&acc_dk)[kN],
                                                    const float (&acc_dv)[kN], bool dk_any, int r0, int col0, int t);
  template <int kN>
  __device__ __forceinline__ static void add_dkdv_in_turn(const sm80::BwdParams& p, const Steps& w,
                                                          const float (&acc_dk)[kN], const float (&acc_dv)[kN],
                                                          bool dk_any, int r0, int col0, int t);
  template <int kN>
  __device__ __forceinline__ static void store_dkdv_tma(const Params& params, uint32_t smem_base, char* smem,
                                                        const Steps& w, const float (&acc_dk)[kN],
                                                        const float (&acc_dv)[kN], bool dk_any, int group, int row0,
                                                        int col0);
  template <int kN>
  __device__ __forceinline__ static void epilogue(const Params& params, uint32_t smem_base, char* smem,
                                                  uint64_t* bars, const Steps& w, const float (&acc_dk)[kN],
                                                  const float (&acc_dv)[kN], bool dk_any, int group, int row0,
                                                  int col0);
  // warp:: scope. A warp's 16 rows of an m64 x kN fp32 accumulator (this thread: rows g, g + 8
  // from `row`, columns 8i + 2t (+1)) into 32-column panels of 128-byte rows, `panel_bytes`
  // apart, 16-byte chunks swizzled by row % 8 (= g), in the paired column order of dQ_accum
  // (sm80::DqAccumLayout::kPaired): chunk 2t + J of a panel row holds columns 2t, 2t + 1 of its n8
  // chunks 2J and 2J + 1, one 16-byte store (8 a warp row, 4 wavefronts: row g's chunks and row
  // g ^ 1's are of opposite parity, so a quarter warp covers the 32 banks once).
  template <int kN>
  __device__ __forceinline__ static void store_dq_paired(char* row, int panel_bytes, const float (&acc)[kN / 2],
                                                         int g, int t) {
#pragma unroll
    for (int c = 0; c < kN / kDqPanelCols; ++c) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int i = 4 * c + 2 * j;  // n8 chunks i, i + 1
        char* dst = row + c * panel_bytes + (((2 * t + j) ^ g) << 4);
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
          *reinterpret_cast<float4*>(dst + 8 * hh * kRowBytes) = make_float4(
              acc[4 * i + 2 * hh], acc[4 * i + 2 * hh + 1], acc[4 * i + 4 + 2 * hh], acc[4 * i + 5 + 2 * hh]);
      }
    }
  }
  // warp:: scope. A warp's 16 rows of the transposed dQ accumulator (dQᵀ, m64 x kBlockM; this
  // thread: d rows d0, d0 + 8, q columns 8i + 2t (+1)) into the dQ tile [q][d] in 32-column
  // panels of 128-byte rows, plain column order, 16-byte chunks swizzled by q % 8: one 4-byte
  // store an element, a warp's 32 on 32 distinct banks (d % 32 spans 8 rows' chunks under the
  // swizzle of 4 q rows).
  __device__ __forceinline__ static void store_dq_transposed(char* tile, const float (&acc)[kDqAccum], int d0, int t) {
#pragma unroll
    for (int i = 0; i < kBlockM / 8; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int q = 8 * i + 2 * t + (e & 1);
        const int d = d0 + 8 * (e >> 1);
        const int c = d % kDqPanelCols;
        char* row = tile + (d / kDqPanelCols) * kDqPanelBytes + q * kRowBytes;
        *reinterpret_cast<float*>(row + (((c / 4) ^ (q & 7)) << 4) + (c % 4) * 4) = acc[4 * i + e];
      }
    }
  }
  // The first kLsePre LSE pairs of a thread's columns, read by the caller before it waits for Sᵀ so
  // that their shared-memory latency runs under the GEMM (read after the wait, the first
  // exponentials stalled on them: ~6% of the consumers' stall samples at hdim 128; at hdim 64,
  // with 128-row q blocks, +0.5..2.5%).
  static constexpr int kLsePre = 2;
  __device__ __forceinline__ static void read_lse_pre(const float* lse_s, int col0, float2 (&pre)[kLsePre]) {
    const int t = static_cast<int>(threadIdx.x) % 4;
#pragma unroll
    for (int i = 0; i < kLsePre; ++i) pre[i] = *reinterpret_cast<const float2*>(lse_s + col0 + 8 * i + 2 * t);
  }
  template <int kN>
  __device__ __forceinline__ static void probs_and_grads(const sm80::BwdParams& p, const Steps& w, float (&st)[kN],
                                                         float (&dpt)[kN], const float* lse_s,
                                                         const float2 (&lse_pre)[kLsePre], const float* dsum_s,
                                                         int q0, int col0, int kv, bool full_tile);
  __device__ __forceinline__ static void consumer(const Params& params, uint32_t smem_base, char* smem,
                                                  uint64_t* bars, const Steps& w, int tile, uint32_t ring);
};

template <int D, int BN, int BM, int S, bool DkX, bool Bf16, bool DqL, int Ps>
__device__ __forceinline__ bool BwdKernel<D, BN, BM, S, DkX, Bf16, DqL, Ps>::decode(const sm80::BwdParams& p, bool rotate, int idx,
                                                                     Steps& w) {
  // kv block fastest (the CTAs running at once share their head's Q and dO in L2); ascending
  // (causal: the longest tiles of a head first), or in the deterministic mode descending: there
  // the dQ tiles of a q block are added from the highest kv block down, so every tile waits only
  // on tiles drawn before it, each one step ahead of it (dq_turn; rotate: RotatedQOrder's turns,
  // the tiles dealt in rounds of whole heads, rotated_order). GQA under a causal-like
  // mask: kv block slowest, so that the longest tiles of every kv head start first (each runs
  // the group's query heads: kv block fastest left the last heads' long tiles to the end). Head
  // tiles: kv block fastest, query head next, as without GQA.
  const int heads = head_tiles(p) ? p.heads_q : p.heads_kv;
  const int heads_batch = heads * p.batch;  // below 2^30 as the tiles
  const bool kv_slowest = !head_tiles(p) && p.group > 1 && LongestFirstScheduler::by_length(mask_of(p));
  const int nb = kv_slowest ? idx / heads_batch : idx % p.num_kv_blocks;
  w.kv_block = p.locks != nullptr ? p.num_kv_blocks - 1 - nb : nb;
  const int rest = kv_slowest ? idx % heads_batch : idx / p.num_kv_blocks;
  w.h = rest % heads;
  w.b = rest / heads;
  if (p.cu_seqlens_q != nullptr) {
    w.q_first = p.cu_seqlens_q[w.b];
    w.k_first = p.cu_seqlens_k[w.b];
    w.sq = p.cu_seqlens_q[w.b + 1] - w.q_first;
    w.sk = p.cu_seqlens_k[w.b + 1] - w.k_first;
    w.map_b = 0;
  } else {
    w.q_first = w.k_first = 0;
    w.sq = p.seqlen_q;
    w.sk = p.seqlen_k;
    w.map_b = w.b;
  }
  const int sq = w.sq, sk = w.sk;
  w.kv0 = w.kv_block * kBlockN;
  if (w.kv0 >= sk) return false;  // varlen: this batch's keys end earlier
  w.kv_rows = min(kBlockN, sk - w.kv0);

  // Query rows that see some key of this block: [row_lo, row_hi) (key_begin/key_end monotone);
  // the q blocks covering them, for each query head of the group (q block fastest).
  const fa::Mask mask = mask_of(p);
  const int kv0 = w.kv0, kv_end = w.kv0 + w.kv_rows;
  const int row_lo = first_row(sq, [&](int r) { return mask.key_end(r, sq, sk) > kv0; });
  const int row_hi = first_row(sq, [&](int r) { return mask.key_begin(r, sq, sk) >= kv_end; });
  w.qb_first = row_lo / kBlockM;
  const int qb_end = (row_hi + kBlockM - 1) / kBlockM;
  w.n_qb = qb_end > w.qb_first ? qb_end - w.qb_first : 0;
  w.steps = head_tiles(p) ? w.n_qb : w.n_qb * p.group;
  // The rotated order over this batch's q and kv blocks (varlen: fewer than the maximum).
  if (rotate) w.qb_first = RotatedQOrder::first_qb(w.kv_block, w.n_qb, (sk + kBlockN - 1) / kBlockN);
  return true;
}

template <int D, int BN, int BM, int S, bool DkX, bool Bf16, bool DqL, int Ps>
__device__ __forceinline__ void BwdKernel<D, BN, BM, S, DkX, Bf16, DqL, Ps>::operator()(const Params& params,
                                                                        char* smem_raw) const {
  // 1024-byte aligned tiles (the swizzle atom), then the work slots and the barriers.
  const uint32_t raw = ptx::smem_u32(smem_raw);
  const uint32_t pad = (kAlign - (raw % kAlign)) % kAlign;
  char* smem = smem_raw + pad;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + kOffBars);
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    SmemBarrier{bars + kBarKvFull}.init(1);
    for (int s = 0; s < kStages; ++s) {
      SmemBarrier{bars + kBarFull + s}.init(32);  // the producer warp's lanes
      // every consumer thread (release_stage); split-D: the writer, once it has read the dQ
      // tile there
      SmemBarrier{bars + kBarEmpty + s}.init(kSplitD ? 1 : kConsumerThreads);
      if (kSplitD) SmemBarrier{bars + kBarDqFull + s}.init(kConsumerThreads);
    }
    SmemBarrier{bars + kBarKvEmpty}.init(1);  // one consumer thread, once K and V are free
    for (int i = 0; i < 2; ++i) {
      SmemBarrier{bars + kBarTileFull + i}.init(1);                            // the producer's lane 0
      SmemBarrier{bars + kBarTileEmpty + i}.init(kConsumerThreads + 32);  // every reader: consumers, writer
    }
    ::cuda::ptx::fence_mbarrier_init(::cuda::ptx::sem_release, ::cuda::ptx::scope_cluster);
  }
  __syncthreads();

  const WarpGroupRole role = static_cast<WarpGroupRole>(tid / kWarpGroupThreads);
  if (role == WarpGroupRole::producer) {
    ptx::warpgroup_reg_dealloc<kProducerRegs>();
    if (tid < 32) producer(params, smem, bars);
    if (tid >= 32 && tid < 64) dq_writer(params, smem, bars);
  } else {
    ptx::warpgroup_reg_alloc<kConsumerRegs>();
    uint32_t ring = 0;
    for (int tile = 0;; ++tile) {
      const Steps w = take_tile(smem, bars, tile);
      if (w.kv_block < 0) break;
      if constexpr (kSplitD) {
        consumer_split_d(params, raw + pad, smem, bars, w, tile, ring);
      } else {
        consumer(params, raw + pad, smem, bars, w, tile, ring);
      }
      ring += static_cast<uint32_t>(w.steps);
    }
    // The writer's hand-back of the last dQ tile: one a step, each taken before the next store
    // (kDvOverDq: before a tile's dV is staged over it, in the epilogue).
    if (!kSplitD && !kDvOverDq && ring > 0)
      ptx::named_barrier_sync(static_cast<int>(BwdBarrier::dq_empty), kDqSyncThreads);
  }
}

// warp:: scope (the producer warp). Per tile: draw it (the first is blockIdx.x, each next
// gridDim.x + the counter, drawn once this tile's loads are issued, about two steps before its
// end: drawn earlier, a CTA that just began a long tile would hold the next one while others
// sit idle; varlen tiles past their batch's keys are skipped), hand it over (a work slot), then per
// step Q and dO by TMA from lane 0 (which first sets the byte count) and, while they load,
// LSE·log2e and D by the 32 lanes (ordinary loads and stores: rows past sq get +inf and 0, so
// P = dS = 0 there); every lane arrives on full[stage]. K and V load once the previous tile's
// are free (kv_empty), after the first step's Q and dO: the ring runs on over the tiles, so
// those load under the previous tile's last step.
template <int D, int BN, int BM, int S, bool DkX, bool Bf16, bool DqL, int Ps>
__device__ __forceinline__ void BwdKernel<D, BN, BM, S, DkX, Bf16, DqL, Ps>::producer(const Params& params, char* smem,
                                                                      uint64_t* bars) {
  const sm80::BwdParams& p = params.prob;
  constexpr float kLog2e = 1.4426950408889634f;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int num_tiles = static_cast<int>(num_tiles_of(p));  // below 2^30 (can_implement)
  const bool rotate = params.rotated != 0;
  const bool dealt = dealt_rounds(params);
  // Head tiles wait on tiles drawn before them (add_dkdv_in_turn): every tile is drawn, the
  // first too, so that only CTAs already running hold one (a CTA not yet started, its SM taken
  // by other work, holds none that another waits on). Else the first is blockIdx.x.
  const int first_drawn = head_tiles(p) ? 0 : static_cast<int>(gridDim.x);
  int idx = static_cast<int>(blockIdx.x);
  const auto draw = [&] {
    if (dealt) {
      idx += static_cast<int>(gridDim.x);
      return;
    }
    const int drawn = lane == 0 ? atomicAdd(p.tile_counter, 1) : 0;
    idx = first_drawn + __shfl_sync(0xffffffffu, drawn, 0);
  };
  if (head_tiles(p)) draw();
  uint32_t ring = 0;
  for (int tile = 0;; ++tile) {
    Steps w;
    bool any = false;
    while (idx < num_tiles && !(any = decode(p, rotate, idx, w))) draw();
    if (!any) w.kv_block = -1;  // none left
    // The slot's readers released its previous tile (a fresh barrier's "previous phase" counts
    // as complete).
    SmemBarrier{bars + kBarTileEmpty + (tile & 1)}.wait(((tile >> 1) & 1) ^ 1);
    if (lane == 0) {
      reinterpret_cast<Steps*>(smem + kOffWork + (tile & 1) * kWorkSlotBytes)[0] = w;
      SmemBarrier{bars + kBarTileFull + (tile & 1)}.arrive();
    }
    if (!any) break;
    const auto load_kv = [&] {
      if (tile > 0) SmemBarrier{bars + kBarKvEmpty}.wait((tile - 1) & 1);  // the previous tile's K, V are free
      if (lane != 0) return;
      const SmemBarrier kv_full{bars + kBarKvFull};
      if (w.steps == 0) {
        kv_full.arrive();  // no step reads K or V: the phase completes with no bytes
        return;
      }
      kv_full.arrive_expect_tx(2 * kKVBytes);
      for (int c = 0; c < kPanels; ++c) {
        const int32_t coords[4] = {c * kPanelCols, w.k_first + w.kv0, kv_head(p, w), w.map_b};
        ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_cluster, ::cuda::ptx::space_global,
                                          smem + kOffK + c * kKVPanelBytes, &params.tm_k, coords, kv_full.bar);
        ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_cluster, ::cuda::ptx::space_global,
                                          smem + kOffV + c * kKVPanelBytes, &params.tm_v, coords, kv_full.bar);
      }
    };
    const auto load_step = [&](int s) {
      const int stage = static_cast<int>((ring + s) % kStages);
      const uint32_t phase = ((ring + s) / kStages) & 1;
      const int h = step_head(p, w, s);
      const int q0 = step_qb(w, s) * kBlockM;
      const SmemBarrier full{bars + kBarFull + stage}, empty{bars + kBarEmpty + stage};
      // LSE and D of the step's rows, read before the wait for the stage (their latency runs
      // under it): +inf and 0 past sq; a row with no visible key has LSE = −inf: +inf here, so
      // that P = 0 there, never NaN.
      const float* lse = p.lse + stat_row(p, w, h);
      const float* dsum = p.dsum + stat_row(p, w, h);
      constexpr int kRowIters = (kBlockM + 31) / 32;
      float lse_r[kRowIters], dsum_r[kRowIters];
#pragma unroll
      for (int i = 0; i < kRowIters; ++i) {
        const int r = q0 + lane + 32 * i;
        const bool in = lane + 32 * i < kBlockM && r < w.sq;
        lse_r[i] = in ? lse[r] : -INFINITY;
        dsum_r[i] = in ? dsum[r] : 0.f;
      }
      // The consumers released this stage (parity of the previous round; a fresh barrier's
      // "previous phase" counts as complete).
      empty.wait(phase ^ 1);
      if (lane == 0) {
        full.expect_tx(2 * kQBytes);
        for (int c = 0; c < kPanels; ++c) {
          const int32_t coords[4] = {c * kPanelCols, w.q_first + q0, h, w.map_b};
          ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_cluster, ::cuda::ptx::space_global,
                                            smem + kOffQ + stage * kQBytes + c * kQPanelBytes, &params.tm_q,
                                            coords, full.bar);
          ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_cluster, ::cuda::ptx::space_global,
                                            smem + kOffDO + stage * kQBytes + c * kQPanelBytes, &params.tm_do,
                                            coords, full.bar);
        }
      }
      float* lse_s = reinterpret_cast<float*>(smem + kOffLse) + stage * kBlockM;
      float* dsum_s = reinterpret_cast<float*>(smem + kOffDsum) + stage * kBlockM;
#pragma unroll
      for (int i = 0; i < kRowIters; ++i) {
        if (lane + 32 * i >= kBlockM) continue;
        lse_s[lane + 32 * i] = lse_r[i] == -INFINITY ? INFINITY : lse_r[i] * kLog2e;
        dsum_s[lane + 32 * i] = dsum_r[i];
      }
      full.arrive();
    };
    // The first step's stage comes free during the previous tile's last step, before its K and
    // V do (at its end): that step's loads go first, then K and V (the CTA's first tile: K and
    // V first), then the rest.
    const int early = tile > 0 && w.steps > 0 ? 1 : 0;
    for (int s = 0; s < early; ++s) load_step(s);
    load_kv();
    for (int s = early; s < w.steps; ++s) load_step(s);
    ring += static_cast<uint32_t>(w.steps);
    draw();
  }
}

// warp:: scope (warp 1 of the producer warpgroup). Per tile, per step: wait for the consumers'
// dQ tile (dq_full), add it into dQ_accum by one bulk tensor reduction per 32-column panel (rows
// past sq are not written) from lane 0, and hand the tile back (dq_empty, after every step:
// the consumers take each before their next dQ store, a tile's last in its epilogue where dV
// goes over the dQ tile, else as they leave; split-D: release the stage it was written into)
// once read. The ordered reduction (p.locks): the tiles of one (query head, q block) are added in
// descending kv-block order; lane 0 waits for the counter of the higher blocks (dq_turn), and
// releases it once its own addition is complete; with p.dq_first_stored (dQ_accum not zeroed)
// the first turn stores its tile rather than adding it. Claims (p.claims, dQ_accum not zeroed):
// the first writer to reach a (query head, q block) stores its tile and publishes it once
// complete (kClaimPublished), right after handing the buffer back; the others wait for that and
// add theirs.
template <int D, int BN, int BM, int S, bool DkX, bool Bf16, bool DqL, int Ps>
__device__ __forceinline__ void BwdKernel<D, BN, BM, S, DkX, Bf16, DqL, Ps>::dq_writer(const Params& params, char* smem,
                                                                       uint64_t* bars) {
  namespace cp = ::cuda::ptx;
  const sm80::BwdParams& p = params.prob;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  uint32_t ring = 0;
  for (int tile = 0;; ++tile) {
    const Steps w = take_tile(smem, bars, tile);
    if (w.kv_block < 0) break;
    // The counter of step s's (query head, q block) in p.locks / p.claims.
    const auto block_of = [&](int s) {
      return (int64_t(w.b) * p.heads_q + step_head(p, w, s)) * p.num_q_blocks + step_qb(w, s);
    };
    // Lane 0 with claims: this step's claim, taken at the end of the step before (the atomic's
    // round trip then runs under the wait for the tile, not before the tile's bulk copy); a
    // tile's first step claims when it starts.
    int claimed = 0;
    for (int s = 0; s < w.steps; ++s, ++ring) {
      const int stage = static_cast<int>(ring % kStages);
      const int h = step_head(p, w, s);
      const int qb = step_qb(w, s);
      const int q0 = qb * kBlockM;
      if constexpr (kSplitD) {
        SmemBarrier{bars + kBarDqFull + stage}.wait((ring / kStages) & 1);
      } else {
        ptx::named_barrier_sync(static_cast<int>(BwdBarrier::dq_full), kDqSyncThreads);
      }
      // Where the additions below are complete, this lane releases `release` by `released`.
      int* release = nullptr;
      int released = 1;
      if (lane == 0) {
        bool store = false;
        const int64_t block = block_of(s);
        if (p.locks != nullptr) {
          release = p.locks + block;
          const int expected = dq_turn(p, params.rotated != 0, w, q0);
          while (ptx::ld_acquire_gpu(release) < expected) {
          }
          store = p.dq_first_stored != 0 && expected == 0;
          cp::fence_proxy_async(cp::space_global);  // the writes below come after the acquire
        } else if (p.claims != nullptr) {
          // The first to claim the block stores its tile and publishes it once complete; the
          // others add theirs after that. A claimant waits on no other CTA between its claim and
          // its publication, so every wait here ends.
          int* claim = p.claims + block;
          int seen = s > 0 ? claimed : ptx::atom_acquire_add_gpu(claim, 1);
          store = seen == 0;
          if (store) {
            release = claim, released = kClaimPublished;
          } else {
            while ((seen & kClaimPublished) == 0) seen = ptx::ld_acquire_gpu(claim);
            cp::fence_proxy_async(cp::space_global);
          }
        }
        for (int c = 0; c < kDqPanels; ++c) {
          const int32_t coords[4] = {c * kDqPanelCols, w.q_first + q0, w.map_b, h};
          char* tile = smem + (kSplitD ? dq_panel_offset(stage, c) : kOffDQ + c * kDqPanelBytes);
          if (store)
            cp::cp_async_bulk_tensor(cp::space_global, cp::space_shared, &params.tm_dq, coords, tile);
          else
            cp::cp_reduce_async_bulk_tensor(cp::space_global, cp::space_shared, cp::op_add, &params.tm_dq, coords, tile);
        }
        cp::cp_async_bulk_commit_group();
        cp::cp_async_bulk_wait_group_read(cp::n32_t<0>{});  // the tile was read: the buffer is free
        if (kSplitD) SmemBarrier{bars + kBarEmpty + stage}.arrive();  // the stage, to the producer
      }
      __syncwarp();
      if (!kSplitD) ptx::named_barrier_arrive(static_cast<int>(BwdBarrier::dq_empty), kDqSyncThreads);
      // The ordered reduction: the next CTA in this q block's order may add once these writes are
      // complete in global memory; claims: the others may add once the stored tile is. The
      // buffer went back to the consumers at their read already.
      if (release != nullptr) {
        cp::cp_async_bulk_wait_group(cp::n32_t<0>{});
        cp::fence_proxy_async(cp::space_global);
        ptx::red_release_add_gpu(release, released);
      }
      if (lane == 0 && p.claims != nullptr && s + 1 < w.steps)
        claimed = ptx::atom_acquire_add_gpu(p.claims + block_of(s + 1), 1);
    }
  }
  if (lane == 0) cp::cp_async_bulk_wait_group(cp::n32_t<0>{});
}

// The epilogue of both consumers: dK = scale · Σ dSᵀ·Q and dV = Σ Pᵀ·dO of this thread's
// accumulators (m64 layout, t = lane % 4: kv rows r0, r0 + 8 of the block; columns col0 + 8i +
// 2t (+1)), rounded to the storage type, 4-byte stores. dK rows no query of the tile sees
// (dk_any false: no GEMM of theirs ran) are zeros: dK starts from its first GEMM's flag in both
// consumers; dV too in split-D (consumer zeroes it at the tile's start).
template <int D, int BN, int BM, int S, bool DkX, bool Bf16, bool DqL, int Ps>
template <int kN>
__device__ __forceinline__ void BwdKernel<D, BN, BM, S, DkX, Bf16, DqL, Ps>::store_dkdv(const sm80::BwdParams& p,
                                                                             const Steps& w, const float (&acc_dk)[kN],
                                                                             const float (&acc_dv)[kN], bool dk_any,
                                                                             int r0, int col0, int t) {
  T* dk = static_cast<T*>(p.dk) + w.map_b * p.dk_batch_stride + int64_t(w.k_first + w.kv0) * p.dk_row_stride +
          kv_head(p, w) * p.dk_head_stride;
  T* dv = static_cast<T*>(p.dv) + w.map_b * p.dv_batch_stride + int64_t(w.k_first + w.kv0) * p.dv_row_stride +
          kv_head(p, w) * p.dv_head_stride;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = r0 + 8 * hh;
    if (r >= w.kv_rows) continue;
#pragma unroll
    for (int i = 0; i < kN / 4; ++i) {
      const int col = col0 + 8 * i + 2 * t;
      if (col < p.head_dim)
        *reinterpret_cast<uint32_t*>(dk + r * p.dk_row_stride + col) =
            dk_any ? pack2<kIsBf16>(acc_dk[4 * i + 2 * hh] * p.scale, acc_dk[4 * i + 2 * hh + 1] * p.scale) : 0u;
      if (col < p.head_dim_v)
        *reinterpret_cast<uint32_t*>(dv + r * p.dv_row_stride + col) =
            dk_any || !kSplitD ? pack2<kIsBf16>(acc_dv[4 * i + 2 * hh], acc_dv[4 * i + 2 * hh + 1]) : 0u;
    }
  }
}

// The epilogue of head tiles (BwdParams::head_tiles), both consumers, every consumer thread:
// this tile's dK·scale and dV (store_dkdv's values, zeros where it writes zeros) summed with the
// group's other query heads of the kv block, in head order, into the fp32 accumulators, which
// the postprocess rounds into dK and dV. The first consumer thread waits until the turn counter
// counts the heads before this one (acquire; they are tiles drawn earlier, each run or running
// in some CTA, so the wait ends); then the first head stores its part and each later one adds
// its own by reductions (no read back: a pass with loads cost the hdim-128 step loop spills);
// then, all of them issued and fenced, the first thread counts this head done (release). The
// adds' order is fixed: dK and dV are reproducible bit for bit.
template <int D, int BN, int BM, int S, bool DkX, bool Bf16, bool DqL, int Ps>
template <int kN>
__device__ __forceinline__ void BwdKernel<D, BN, BM, S, DkX, Bf16, DqL, Ps>::add_dkdv_in_turn(
    const sm80::BwdParams& p, const Steps& w, const float (&acc_dk)[kN], const float (&acc_dv)[kN], bool dk_any,
    int r0, int col0, int t) {
  const int hk = kv_head(p, w), turn = w.h - hk * p.group;
  const bool lead = threadIdx.x == kWarpGroupThreads;
  // The block's first key row, which names its turn counter: the fields store_dkdv reads too.
  const int64_t row_k = int64_t(w.map_b) * p.seqlen_k + w.k_first + w.kv0;
  int* counter = p.dkv_turns + row_k * p.heads_kv + hk;
  if (lead && turn > 0) {
    while (ptx::ld_acquire_gpu(counter) < turn) __nanosleep(64);
  }
  __syncwarp();  // the lead's warp converged before the aligned barrier
  ptx::named_barrier_sync(static_cast<int>(BwdBarrier::kv_free), kConsumerThreads);
  const auto put_part = [&](const auto& acc, float mul, bool any, float* sums, int64_t pitch, int cols) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = r0 + 8 * hh;
      if (r >= w.kv_rows) continue;
#pragma unroll
      for (int i = 0; i < kN / 4; ++i) {
        const int col = col0 + 8 * i + 2 * t;
        if (col >= cols) continue;
        const int e = 4 * i + 2 * hh;
        const float x = any ? acc[e] * mul : 0.f, y = any ? acc[e + 1] * mul : 0.f;
        float* at = sums + r * pitch + col;
        if (turn == 0) {
          *reinterpret_cast<float2*>(at) = make_float2(x, y);
        } else {
          ptx::red_add_f32x2(at, x, y);
        }
      }
    }
  };
  const int64_t dk_pitch = int64_t(p.heads_kv) * p.head_dim, dv_pitch = int64_t(p.heads_kv) * p.head_dim_v;
  put_part(acc_dk, p.scale, dk_any, p.dk_accum + row_k * dk_pitch + int64_t(hk) * p.head_dim, dk_pitch, p.head_dim);
  put_part(acc_dv, 1.f, dk_any || !kSplitD, p.dv_accum + row_k * dv_pitch + int64_t(hk) * p.head_dim_v, dv_pitch,
           p.head_dim_v);
  if (turn < p.group - 1) {
    __threadfence();
    ptx::named_barrier_sync(static_cast<int>(BwdBarrier::kv_free), kConsumerThreads);
    if (lead) ptx::red_release_add_gpu(counter, 1);
  }
}

// The epilogue by TMA (params.dkdv_by_tma), warpgroup:: scope, both consumers, with the staging
// area free (epilogue): this warpgroup's dK·scale and dV (kv rows row0 .. + 63, columns col0 ..
// + 2kN) go as 16-bit values to the same rows and columns of K and V's layout at kOffDk, kOffDv (the
// TMA layout: 64-column panels, 128-byte swizzle), and one thread stores them by TMA (rows past
// Sk and columns past D clipped by the maps) and waits until they are read. Zeros where
// store_dkdv writes zeros.
template <int D, int BN, int BM, int S, bool DkX, bool Bf16, bool DqL, int Ps>
template <int kN>
__device__ __forceinline__ void BwdKernel<D, BN, BM, S, DkX, Bf16, DqL, Ps>::store_dkdv_tma(
    const Params& params, uint32_t smem_base, char* smem, const Steps& w, const float (&acc_dk)[kN],
    const float (&acc_dv)[kN], bool dk_any, int group, int row0, int col0) {
  namespace cp = ::cuda::ptx;
  const sm80::BwdParams& p = params.prob;
  constexpr int kCols = 2 * kN;
  const int first = col0 / kPanelCols;  // this warpgroup's first panel
  const int offset = first * kKVPanelBytes + row0 * kRowBytes;
  const bool none = !dk_any;
  const float dk_mul[2] = {p.scale, p.scale};
  const float dv_mul[2] = {1.f, 1.f};
  warpgroup_stage_sw128<kIsBf16, kCols>(smem_base + kOffDk + offset, kKVPanelBytes, acc_dk, dk_mul, none);
  warpgroup_stage_sw128<kIsBf16, kCols>(smem_base + kOffDv + offset, kKVPanelBytes, acc_dv, dv_mul, none && kSplitD);
  // Generic-proxy writes, read by TMA (async proxy): fence, then the warpgroup's barrier.
  cp::fence_proxy_async(cp::space_shared);
  ptx::named_barrier_sync(static_cast<int>(BwdBarrier::dkdv_staged) + group, kWarpGroupThreads);
  if (threadIdx.x % kWarpGroupThreads == 0) {
#pragma unroll
    for (int c = 0; c < kCols / kPanelCols; ++c) {
      const int32_t coords[4] = {col0 + c * kPanelCols, w.kv0 + row0, kv_head(p, w), w.map_b};
      cp::cp_async_bulk_tensor(cp::space_global, cp::space_shared, &params.tm_dk, coords,
                               smem + kOffDk + offset + c * kKVPanelBytes);
      cp::cp_async_bulk_tensor(cp::space_global, cp::space_shared, &params.tm_dv, coords,
                               smem + kOffDv + offset + c * kKVPanelBytes);
    }
    cp::cp_async_bulk_commit_group();
    cp::cp_async_bulk_wait_group_read(cp::n32_t<0>{});  // shared memory stays until read
  }
}

// The end of a tile, warpgroup:: scope, both consumers, once this warpgroup's last GEMMs have
// landed. kv_free: every consumer's have, so K, V and the dS buffers have no reader left; one
// thread hands K and V to the producer for the next tile (kv_empty) unless dK and dV are staged
// over them (split-D). Then dK and dV leave: by TMA from kOffDk, kOffDv, the consumers meeting
// again once both warpgroups' tiles are read (the next tile's dS and dQ go there), or by plain
// stores.
template <int D, int BN, int BM, int S, bool DkX, bool Bf16, bool DqL, int Ps>
template <int kN>
__device__ __forceinline__ void BwdKernel<D, BN, BM, S, DkX, Bf16, DqL, Ps>::epilogue(
    const Params& params, uint32_t smem_base, char* smem, uint64_t* bars, const Steps& w, const float (&acc_dk)[kN],
    const float (&acc_dv)[kN], bool dk_any, int group, int row0, int col0) {
  const bool tma = params.dkdv_by_tma != 0;
  const bool lead = threadIdx.x == kWarpGroupThreads;  // the first consumer thread
  ptx::named_barrier_sync(static_cast<int>(BwdBarrier::kv_free), kConsumerThreads);
  if (lead && !(kSplitD && tma)) SmemBarrier{bars + kBarKvEmpty}.arrive();
  // The writer read the tile's last dQ tile, which dV goes over (the next tile's first store then
  // needs no wait).
  if (kDvOverDq && w.steps > 0) ptx::named_barrier_sync(static_cast<int>(BwdBarrier::dq_empty), kDqSyncThreads);
  if (tma) {
    store_dkdv_tma(params, smem_base, smem, w, acc_dk, acc_dv, dk_any, group, row0, col0);
    ptx::named_barrier_sync(static_cast<int>(BwdBarrier::kv_free), kConsumerThreads);
    if (lead && kSplitD) SmemBarrier{bars + kBarKvEmpty}.arrive();
  } else {
    const int tid = static_cast<int>(threadIdx.x) % kWarpGroupThreads;
    // this thread's rows: row0 + 16·warp + g (+ 8), columns col0 + 8i + 2t (+ 1)
    const int r0 = row0 + 16 * (tid / 32) + tid % 32 / 4;
    if (head_tiles(params.prob)) {
      add_dkdv_in_turn(params.prob, w, acc_dk, acc_dv, dk_any, r0, col0, tid % 4);
    } else {
      store_dkdv(params.prob, w, acc_dk, acc_dv, dk_any, r0, col0, tid % 4);
    }
  }
}

// warpgroup:: scope, with this warpgroup's Sᵀ GEMM complete and its dPᵀ GEMM the one in flight
// (waited here). In place on an m64 x (kN / 2) accumulator pair whose rows are kv, kv + 8 and
// columns col0 + 8i + 2t (+1) of the step's q block (q0 + column):
//   Pᵀ = exp2(S'·log2e − LSE·log2e), S' = scale·S or c·tanh(scale·S / c);
//   dSᵀ_x = Pᵀ∘(dPᵀ − D) (∘ (1 − tanh²) under softcap). Masked and padded entries: P = 0.
template <int D, int BN, int BM, int S, bool DkX, bool Bf16, bool DqL, int Ps>
template <int kN>
__device__ __forceinline__ void BwdKernel<D, BN, BM, S, DkX, Bf16, DqL, Ps>::probs_and_grads(
    const sm80::BwdParams& p, const Steps& w, float (&st)[kN], float (&dpt)[kN], const float* lse_s,
    const float2 (&lse_pre)[kLsePre], const float* dsum_s, int q0, int col0, int kv, bool full_tile) {
  static_assert(kN / 4 >= kLsePre, "prefetched LSE pairs");
  const int t = static_cast<int>(threadIdx.x) % 4;
  // Tiles not wholly visible: `value` into the entries outside the rows that see each of this
  // thread's two keys (kv, kv + 8), as block-local columns in 32-bit (none past the keys). A
  // pass of its own behind one branch a step, so the full tiles' code stays branch-free and
  // small (the instruction cache).
  const auto mask_out_by = [&](const fa::Mask& mask, float (&x)[kN], float value) {
    // consumer's rows: 64·group + 16·warp + lane / 4, group = tid / 128 − 1 (kLaneAnew).
    const int tid = kLaneAnew ? thread_index_per_tile() : 0;
    const int kv_row = kLaneAnew ? w.kv0 + 16 * (tid / 32) - 64 + tid % 32 / 4 : kv;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int k = kv_row + 8 * r;
      const int lo = k < w.sk ? mask.query_begin(k, w.sq, w.sk) - q0 - col0 - 2 * t : 0;
      const int hi = k < w.sk ? mask.query_end(k, w.sq, w.sk) - q0 - col0 - 2 * t : 0;
#pragma unroll
      for (int i = 0; i < kN / 4; ++i) {
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          const int c = 8 * i + (e & 1);  // column − col0 − 2t: a constant
          if (c < lo || c >= hi) x[4 * i + e] = value;
        }
      }
    }
  };
  // p.mask in place on the general kernels (a copy through mask_of changes their schedule).
  const auto mask_out = [&](float (&x)[kN], float value) {
    if constexpr (kPasses == kPassesAll) {
      mask_out_by(p.mask, x, value);
    } else {
      mask_out_by(fixed_mask<kPasses>(), x, value);
    }
  };
  // Pᵀ (and, when kFused, dSᵀ in the same pass: softcap needs tanh' of each score).
  const auto scores = [&](auto fused) {
    constexpr bool kFused = decltype(fused)::value;
#pragma unroll
    for (int i = 0; i < kN / 4; ++i) {
      const int col = col0 + 8 * i + 2 * t;
      const float2 l2 = i < kLsePre ? lse_pre[i] : *reinterpret_cast<const float2*>(lse_s + col);
      const float2 dd = *reinterpret_cast<const float2*>(dsum_s + col);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x, chain = 1.f;
        if constexpr (kFused) {
          const float th = softcap_tanh(st[4 * i + e] * p.softcap_in);
          x = th * p.score_log2;
          chain = 1.f - th * th;
        } else {
          x = st[4 * i + e] * p.score_log2;
        }
        const float pr = ptx::ex2_approx(x - ((e & 1) ? l2.y : l2.x));
        st[4 * i + e] = pr;
        if constexpr (kFused) dpt[4 * i + e] = pr * (dpt[4 * i + e] - ((e & 1) ? dd.y : dd.x)) * chain;
      }
    }
  };
  if (kPasses == kPassesAll && p.softcap > 0.f) {  // uniform
    ptx::warpgroup_wait<0>();
    ptx::warpgroup_fence_operand(dpt);
    scores(std::true_type{});
    if (!full_tile) {
      mask_out(st, 0.f);
      mask_out(dpt, 0.f);
    }
  } else {
    scores(std::false_type{});  // under the dPᵀ GEMM
    if (!kUnmasked && !full_tile) mask_out(st, 0.f);
    ptx::warpgroup_wait<0>();
    ptx::warpgroup_fence_operand(dpt);
#pragma unroll
    for (int i = 0; i < kN / 4; ++i) {
      const float2 dd = *reinterpret_cast<const float2*>(dsum_s + col0 + 8 * i + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) dpt[4 * i + e] = st[4 * i + e] * (dpt[4 * i + e] - ((e & 1) ? dd.y : dd.x));
    }
  }
}

// warpgroup:: scope (one consumer warpgroup; both meet on the named barriers). Warp `warp` of
// warpgroup `group` owns kv rows 64·group + 16·warp + {g, g + 8} of Sᵀ, dPᵀ, dK and dV.
template <int D, int BN, int BM, int S, bool DkX, bool Bf16, bool DqL, int Ps>
__device__ __forceinline__ void BwdKernel<D, BN, BM, S, DkX, Bf16, DqL, Ps>::consumer(const Params& params,
                                                                      uint32_t smem_base, char* smem,
                                                                      uint64_t* bars, const Steps& w, int tile,
                                                                      uint32_t ring) {
  const sm80::BwdParams& p = params.prob;
  const int sq = w.sq, sk = w.sk;
  const fa::Mask mask = mask_of(p);
  const int tid = thread_index_per_tile();
  const int group = warp_uniform(tid / kWarpGroupThreads - 1);
  const int wtid = tid % kWarpGroupThreads;
  const int warp = wtid / 32;
  const int lane = wtid % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int r0 = 64 * group + 16 * warp + g;  // block-local kv row of d[4i], d[4i+1]

  // dK starts from its first GEMM's zero-accumulate flag, never from register moves: its last
  // GEMM of a step runs on across the loop's back edge, and ptxas serialises every wgmma when
  // ordinary instructions define an in-flight accumulator on some path into the loop.
  float acc_dk[kDT * 4];
  float acc_dv[kDT * 4];
#pragma unroll
  for (int i = 0; i < kDT * 4; ++i) acc_dv[i] = 0.f;

  // This warpgroup's 64 kv rows of K and V in every panel (K-major A operand).
  const uint32_t k_wg = smem_base + kOffK + 64 * group * kRowBytes;
  const uint32_t v_wg = smem_base + kOffV + 64 * group * kRowBytes;
  // dQ slice of this warpgroup: q rows dq_m0 .. +63, columns dq_n0 .. + kDqN.
  const int dq_m0 = kDqSplitRows ? 64 * group : 0;
  const int dq_n0 = kDqSplitRows ? 0 : kDqN * group;
  SmemBarrier{bars + kBarKvFull}.wait(tile & 1);

  // dSᵀ as A fragments: the dK GEMM of step s reads them until step s + 1 waits for it.
  uint32_t ds_frag[kKT][4];
  auto& ds_flat = reinterpret_cast<uint32_t(&)[kKT * 4]>(ds_frag);

  // dS [q][kv] into panel `group` of buffer s % 2, transposed by stmatrix: matrix j of step
  // kk holds q rows 16kk + 8(j / 2) .. +7, kv columns 16·warp + 8(j % 2) .. +7 of the panel.
  // Buffer s % 2 is free: the other warpgroup passed ds_ready of step s − 1, so it had waited
  // for its dQ GEMM of step s − 2. Then both warpgroups' panels are complete (ds_ready).
  const auto stage_ds = [&](int s, const uint32_t (&frag)[kKT][4]) {
    const uint32_t ds_panel = smem_base + kOffDS + (s & 1) * kDSBytes + group * kDSPanelBytes;
    if constexpr (kLaneAnew) {
      const int x = thread_index_per_tile() % kWarpGroupThreads;
      const int j = x % 32 / 8, row = 8 * (j >> 1) + x % 8, chunk = 2 * (x / 32) + (j & 1);
      const uint32_t at = ds_panel + row * kRowBytes + ((chunk ^ (row & 7)) << 4);
#pragma unroll
      for (int kk = 0; kk < kKT; ++kk) ptx::warp_stmatrix_x4_trans(at + 16 * kk * kRowBytes, frag[kk]);
    } else {
      const int j = lane / 8;
#pragma unroll
      for (int kk = 0; kk < kKT; ++kk) {
        const int q = 16 * kk + 8 * (j >> 1) + lane % 8;
        const int chunk = 2 * warp + (j & 1);
        ptx::warp_stmatrix_x4_trans(ds_panel + q * kRowBytes + ((chunk ^ (q & 7)) << 4), frag[kk]);
      }
    }
    // Generic-proxy writes of dS, then read by wgmma (async proxy): fence before the barrier.
    ::cuda::ptx::fence_proxy_async(::cuda::ptx::space_shared);
    consumer_sync(BwdBarrier::ds_ready, kConsumerThreads);
  };
  // dQ[dq_m0 .., dq_n0 ..] = dS·K   (dS K-major, k = kv over both panels; K rows are kv = the
  // k dimension, D contiguous: MN-major, transpose bit). Transposed: dQᵀ[dq_n0 .. +63, q] =
  // Kᵀ·dSᵀ, the same two operands as A = Kᵀ (MN-major, transpose bit) and B = dS (K-major).
  const auto issue_dq = [&](int s, float (&acc_dq)[kDqAccum]) {
    ptx::warpgroup_fence_operand(acc_dq);
    ptx::warpgroup_fence();
    const uint32_t ds_base = smem_base + kOffDS + (s & 1) * kDSBytes + dq_m0 * kRowBytes;
    const uint32_t k_base = smem_base + kOffK + (dq_n0 / kPanelCols) * kKVPanelBytes;
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint64_t dds = ptx::make_smem_desc_sw128(ds_base, (kk / 4) * kDSPanelBytes + (kk % 4) * 32, 16, 1024);
      const uint64_t dk = ptx::make_smem_desc_sw128(k_base, kk * 16 * kRowBytes, kKVPanelBytes, 1024);
      if constexpr (kDqTransposed) {
        ptx::warpgroup_mma_ss<kBlockM, kIsBf16, 0, 1>(acc_dq, dk, dds, kk > 0);
      } else {
        ptx::warpgroup_mma_ss<kDqN, kIsBf16, 1>(acc_dq, dds, dk, kk > 0);
      }
    }
    ptx::warpgroup_commit();
  };
  // The dQ tile into shared memory for the writer warp (dQ = scale · dQ_accum, later), once
  // it has read the previous one: 32-column panels in the accumulator's paired order
  // (store_dq_paired).
  const auto store_dq = [&](int s, const float (&acc_dq)[kDqAccum]) {
    if ((kDvOverDq ? s : ring + s) > 0)  // the previous step's, or tile's (epilogue: see above)
      consumer_sync(BwdBarrier::dq_empty, kDqSyncThreads);
    if constexpr (kDqTransposed) {
      store_dq_transposed(smem + kOffDQ, acc_dq, dq_n0 + 16 * warp + g, t);
    } else {
      store_dq_paired<kDqN>(smem + kOffDQ + (dq_n0 / kDqPanelCols) * kDqPanelBytes + (dq_m0 + 16 * warp + g) * kRowBytes,
                            kDqPanelBytes, acc_dq, g, t);
    }
    if (!kDqArriveLate) dq_tile_ready();
  };

  // Leading idle steps: no row of the step's q block sees a key of this warpgroup's 64 kv rows
  // (the last row's keys end before them or the first row's begin after them, the mask's bounds
  // being monotone in the row), or those rows lie past the keys; causal at hdim 128, the second
  // warpgroup on a tile's first q block. Their P and dS are zero: no Sᵀ, dPᵀ, dV or dK GEMM,
  // zeros for the dS panel, and this warpgroup's share of the dQ GEMM as ever. In a loop of
  // their own before the others (no dK in flight yet): in the step loop, the same branch made
  // ptxas serialise every wgmma of the causal instantiation (docs/PERF.md). kIdleSteps: where
  // such steps come with every tile.
  int s = 0;
  if constexpr (kIdleSteps) {
    for (; s < w.steps; ++s) {
      const int q0 = step_qb(w, s) * kBlockM;
      const int k_lo = w.kv0 + 64 * group, q_last = min(q0 + kBlockM, sq) - 1;
      if (!(k_lo >= sk || mask.key_end(q_last, sq, sk) <= k_lo || mask.key_begin(q0, sq, sk) >= k_lo + 64)) break;
      const int stage = static_cast<int>((ring + s) % kStages);
      SmemBarrier{bars + kBarFull + stage}.wait(((ring + s) / kStages) & 1);
      if (kDkAcrossSteps && s > 0) release_stage(bars, (ring + s - 1) % kStages);
      if (kDqArriveLate && s > 0) dq_tile_ready();
      // zeros for this warpgroup's dS panel (any order: no swizzle to follow)
      uint4* panel = reinterpret_cast<uint4*>(smem + kOffDS + (s & 1) * kDSBytes + group * kDSPanelBytes);
#pragma unroll
      for (int i = wtid; i < kDSPanelBytes / 16; i += kWarpGroupThreads) panel[i] = make_uint4(0, 0, 0, 0);
      ::cuda::ptx::fence_proxy_async(::cuda::ptx::space_shared);
      consumer_sync(BwdBarrier::ds_ready, kConsumerThreads);
      float acc_dq[kDqAccum];
      issue_dq(s, acc_dq);
      ptx::warpgroup_wait<0>();
      ptx::warpgroup_fence_operand(acc_dq);
      store_dq(s, acc_dq);
      if constexpr (!kDkAcrossSteps) release_stage(bars, stage);  // else the next step's, or the tile end's
    }
  }
  const int s_first = s;  // the first step with dK GEMMs (its first one zero-accumulates)
  for (; s < w.steps; ++s) {
    const int stage = static_cast<int>((ring + s) % kStages);
    const uint32_t phase = ((ring + s) / kStages) & 1;
    const int h = step_head(p, w, s);
    const int qb = step_qb(w, s);
    const int q0 = qb * kBlockM;
    const SmemBarrier full{bars + kBarFull + stage};
    const uint32_t sq_base = smem_base + kOffQ + stage * kQBytes;
    const uint32_t sdo_base = smem_base + kOffDO + stage * kQBytes;
    full.wait(phase);

    uint32_t p_frag[kKT][4];
    auto& p_flat = reinterpret_cast<uint32_t(&)[kKT * 4]>(p_frag);
    // Sᵀ = K_wg·Qᵀ and dPᵀ = V_wg·dOᵀ   (m64 n=BM, k16 steps: 4 per 128-byte panel row, +32 B)
    float st[kNT * 4];
    float dpt[kNT * 4];
    ptx::warpgroup_fence_operand(st);
    ptx::warpgroup_fence_operand(dpt);
    ptx::warpgroup_fence();
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      const int off = (kk / 4) * kKVPanelBytes + (kk % 4) * 32;
      const int qoff = (kk / 4) * kQPanelBytes + (kk % 4) * 32;
      ptx::warpgroup_mma_ss<kBlockM, kIsBf16, 0>(st, ptx::make_smem_desc_sw128(k_wg, off, 16, 1024),
                                                 ptx::make_smem_desc_sw128(sq_base, qoff, 16, 1024), kk > 0);
    }
    ptx::warpgroup_commit();
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      const int off = (kk / 4) * kKVPanelBytes + (kk % 4) * 32;
      const int qoff = (kk / 4) * kQPanelBytes + (kk % 4) * 32;
      ptx::warpgroup_mma_ss<kBlockM, kIsBf16, 0>(dpt, ptx::make_smem_desc_sw128(v_wg, off, 16, 1024),
                                                 ptx::make_smem_desc_sw128(sdo_base, qoff, 16, 1024), kk > 0);
    }
    ptx::warpgroup_commit();
    const float* lse_s = reinterpret_cast<const float*>(smem + kOffLse) + stage * kBlockM;
    float2 lse_pre[kLsePre];
    read_lse_pre(lse_s, 0, lse_pre);
    if constexpr (kDkAcrossSteps) {
      // dK of step s − 1 (issued before its dQ store) has run under this step's start: its
      // reads of Q, dO (long done) and of ds_frag are over; release that step's stage.
      ptx::warpgroup_wait<2>();
      ptx::warpgroup_fence_operand(acc_dk);
      ptx::warpgroup_fence_operand(ds_flat);
      if (s > 0) release_stage(bars, (ring + s - 1) % kStages);
    }
    ptx::warpgroup_wait<1>();  // Sᵀ landed; dPᵀ may still run under the exponentials below
    ptx::warpgroup_fence_operand(st);
    if (kDqArriveLate && s > 0) dq_tile_ready();  // the previous step's, its stores long done

    const float* dsum_s = reinterpret_cast<const float*>(smem + kOffDsum) + stage * kBlockM;
    const bool full_tile = w.kv_rows == kBlockN && q0 + kBlockM <= sq &&
                           mask.key_begin(q0 + kBlockM - 1, sq, sk) <= w.kv0 &&
                           mask.key_end(q0, sq, sk) >= w.kv0 + kBlockN;
    probs_and_grads(p, w, st, dpt, lse_s, lse_pre, dsum_s, q0, 0, w.kv0 + r0, full_tile);

    // Pᵀ, dSᵀ as A fragments: k16 step kk takes n8 chunks 2kk and 2kk + 1.
#pragma unroll
    for (int kk = 0; kk < kKT; ++kk) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        p_frag[kk][r] = pack2<kIsBf16>(st[8 * kk + 2 * r], st[8 * kk + 2 * r + 1]);
        ds_frag[kk][r] = pack2<kIsBf16>(dpt[8 * kk + 2 * r], dpt[8 * kk + 2 * r + 1]);
      }
    }

    // dV += Pᵀ·dO   (dO rows are q = the k dimension, D contiguous: MN-major, transpose bit;
    // leading offset = bytes between 64-column panels; k16 step = 16 rows)
    ptx::warpgroup_fence_operand(acc_dv);
    ptx::warpgroup_fence_operand(p_flat);
    ptx::warpgroup_fence();
#pragma unroll
    for (int kk = 0; kk < kKT; ++kk) {
      ptx::warpgroup_mma_rs<kHeadDim, kIsBf16, 1>(
          acc_dv, p_frag[kk], ptx::make_smem_desc_sw128(sdo_base, kk * 16 * kRowBytes, kQPanelBytes, 1024), 1);
    }
    ptx::warpgroup_commit();
    stage_ds(s, ds_frag);

    float acc_dq[kDqAccum];
    issue_dq(s, acc_dq);
    ptx::warpgroup_wait<1>();  // dV landed (p_frag free); dQ runs on
    ptx::warpgroup_fence_operand(acc_dv);
    ptx::warpgroup_fence_operand(p_flat);

    // dK += dSᵀ·Q   (as dV, B = Q of the stage), left running into the next step.
    ptx::warpgroup_fence_operand(acc_dk);
    ptx::warpgroup_fence_operand(ds_flat);
    ptx::warpgroup_fence();
#pragma unroll
    for (int kk = 0; kk < kKT; ++kk) {
      ptx::warpgroup_mma_rs<kHeadDim, kIsBf16, 1>(
          acc_dk, ds_frag[kk], ptx::make_smem_desc_sw128(sq_base, kk * 16 * kRowBytes, kQPanelBytes, 1024),
          s > s_first || kk > 0);
    }
    ptx::warpgroup_commit();
    ptx::warpgroup_wait<1>();  // dQ landed; dK runs on
    ptx::warpgroup_fence_operand(acc_dq);
    store_dq(s, acc_dq);
    if constexpr (!kDkAcrossSteps) {  // dK ran under the dQ store
      ptx::warpgroup_wait<0>();
      ptx::warpgroup_fence_operand(acc_dk);
      ptx::warpgroup_fence_operand(ds_flat);
      release_stage(bars, stage);  // Q, dO, LSE, D read
    }
  }
  if (kDqArriveLate && w.steps > 0) dq_tile_ready();  // the last step's
  ptx::warpgroup_wait<0>();  // the last step's dK
  ptx::warpgroup_fence_operand(acc_dk);
  ptx::warpgroup_fence_operand(ds_flat);
  if (kDkAcrossSteps && w.steps > 0) release_stage(bars, (ring + w.steps - 1) % kStages);  // its stage
  epilogue(params, smem_base, smem, bars, w, acc_dk, acc_dv, s_first < w.steps, group, 64 * group, 0);
}

// warpgroup:: scope, split-D (head dim 256, 64 x 64 blocks). Warpgroup `group` owns dK, dV and dQ
// columns d0 = 128·group .. +127 and computes Sᵀ, dPᵀ for q columns 32·group .. +31 of every kv
// row (warp `warp`: rows 16·warp + {g, g + 8}). Per step:
//   Sᵀ_h = K·Q_hᵀ, dPᵀ_h = V·dO_hᵀ (m64n32, k = D); Pᵀ_h, dSᵀ_h in registers;
//   Pᵀ_h, dSᵀ_h → the buffer of step parity, [kv][q] 16-bit, 128-byte swizzle; ds_ready;
//   dQ[:, d0..] = dS·K[:, d0..] (A = dSᵀ read transposed), then dV[:, d0..] += Pᵀ·dO[:, d0..] and
//   dK[:, d0..] += dSᵀ·Q[:, d0..] (A = Pᵀ / dSᵀ K-major from shared memory); once all three
//   have landed, dQ over this warpgroup's columns of the step's Q and dO (dq_panel_offset) and
//   dq_full[stage]: the writer warp adds it into dQ_accum and releases the stage.
template <int D, int BN, int BM, int S, bool DkX, bool Bf16, bool DqL, int Ps>
__device__ __forceinline__ void BwdKernel<D, BN, BM, S, DkX, Bf16, DqL, Ps>::consumer_split_d(const Params& params,
                                                                               uint32_t smem_base, char* smem,
                                                                               uint64_t* bars, const Steps& w,
                                                                               int tile, uint32_t ring) {
  const sm80::BwdParams& p = params.prob;
  const int sq = w.sq, sk = w.sk;
  const fa::Mask mask = mask_of(p);
  const int tid = thread_index_per_tile();
  const int group = warp_uniform(tid / kWarpGroupThreads - 1);
  const int wtid = tid % kWarpGroupThreads;
  const int warp = wtid / 32;
  const int lane = wtid % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int r0 = 16 * warp + g;          // kv row (block-local) of d[4i], d[4i+1]; +8 for d[4i+2..3]
  constexpr int kHalfD = kHeadDim / 2;   // this warpgroup's dK, dV, dQ columns
  constexpr int kHalfQ = kBlockM / 2;    // this warpgroup's Sᵀ, dPᵀ columns
  constexpr int kHalfDT = kHalfD / 8;    // n8 chunks of dK / dV / dQ
  const int d0 = kHalfD * group;
  const int qh0 = kHalfQ * group;

  // dK and dV start from their first GEMMs' zero-accumulate flag: those GEMMs run on across the
  // loop's back edge (see consumer: register moves into them would serialise every wgmma).
  float acc_dk[kHalfDT * 4];
  float acc_dv[kHalfDT * 4];

  const uint32_t k_base = smem_base + kOffK;
  const uint32_t v_base = smem_base + kOffV;
  SmemBarrier{bars + kBarKvFull}.wait(tile & 1);

  for (int s = 0; s < w.steps; ++s) {
    const int stage = static_cast<int>((ring + s) % kStages);
    const uint32_t phase = ((ring + s) / kStages) & 1;
    const int q0 = step_qb(w, s) * kBlockM;
    const SmemBarrier full{bars + kBarFull + stage};
    const uint32_t sq_base = smem_base + kOffQ + stage * kQBytes;
    const uint32_t sdo_base = smem_base + kOffDO + stage * kQBytes;
    full.wait(phase);

    // Sᵀ_h = K·Q_hᵀ and dPᵀ_h = V·dO_hᵀ   (m64 n32; k16 steps over D: 4 per 128-byte panel row)
    float st[kHalfQ / 2];
    float dpt[kHalfQ / 2];
    ptx::warpgroup_fence_operand(st);
    ptx::warpgroup_fence_operand(dpt);
    ptx::warpgroup_fence();
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      const int off = (kk / 4) * kKVPanelBytes + (kk % 4) * 32;
      const int qoff = (kk / 4) * kQPanelBytes + qh0 * kRowBytes + (kk % 4) * 32;
      ptx::warpgroup_mma_ss<kHalfQ, kIsBf16, 0>(st, ptx::make_smem_desc_sw128(k_base, off, 16, 1024),
                                                ptx::make_smem_desc_sw128(sq_base, qoff, 16, 1024), kk > 0);
    }
    ptx::warpgroup_commit();
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      const int off = (kk / 4) * kKVPanelBytes + (kk % 4) * 32;
      const int qoff = (kk / 4) * kQPanelBytes + qh0 * kRowBytes + (kk % 4) * 32;
      ptx::warpgroup_mma_ss<kHalfQ, kIsBf16, 0>(dpt, ptx::make_smem_desc_sw128(v_base, off, 16, 1024),
                                                ptx::make_smem_desc_sw128(sdo_base, qoff, 16, 1024), kk > 0);
    }
    ptx::warpgroup_commit();
    const float* lse_s = reinterpret_cast<const float*>(smem + kOffLse) + stage * kBlockM;
    float2 lse_pre[kLsePre];
    read_lse_pre(lse_s, qh0, lse_pre);
    ptx::warpgroup_wait<1>();  // Sᵀ landed; dPᵀ may still run under the exponentials
    ptx::warpgroup_fence_operand(st);

    const float* dsum_s = reinterpret_cast<const float*>(smem + kOffDsum) + stage * kBlockM;
    const bool full_tile = w.kv_rows == kBlockN && q0 + kBlockM <= sq &&
                           mask.key_begin(q0 + kBlockM - 1, sq, sk) <= w.kv0 &&
                           mask.key_end(q0, sq, sk) >= w.kv0 + kBlockN;
    probs_and_grads(p, w, st, dpt, lse_s, lse_pre, dsum_s, q0, qh0, w.kv0 + r0, full_tile);

    // Pᵀ_h, dSᵀ_h into the buffer of step parity: row kv, 16-byte chunk q / 8 XOR kv % 8 (= g).
    // Buffer s % 2 is free: the other warpgroup passed ds_ready of step s − 1 after waiting for
    // its GEMMs of step s − 2.
    char* pt_s = smem + kOffDS + (s & 1) * kDSBytes;
    char* dst_s = pt_s + kBlockN * kRowBytes;
#pragma unroll
    for (int i = 0; i < kHalfQ / 8; ++i) {
      const int chunk = (qh0 / 8 + i) ^ g;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int off = (r0 + 8 * hh) * kRowBytes + (chunk << 4) + 4 * t;
        *reinterpret_cast<uint32_t*>(pt_s + off) = pack2<kIsBf16>(st[4 * i + 2 * hh], st[4 * i + 2 * hh + 1]);
        *reinterpret_cast<uint32_t*>(dst_s + off) = pack2<kIsBf16>(dpt[4 * i + 2 * hh], dpt[4 * i + 2 * hh + 1]);
      }
    }
    // Generic-proxy writes, then read by wgmma (async proxy): fence before the barrier.
    ::cuda::ptx::fence_proxy_async(::cuda::ptx::space_shared);

    ptx::named_barrier_sync(static_cast<int>(BwdBarrier::ds_ready), kConsumerThreads);

    const uint32_t pt_base = smem_base + kOffDS + (s & 1) * kDSBytes;
    const uint32_t dst_base = pt_base + kBlockN * kRowBytes;
    // dQ[:, d0..] = dS·K[:, d0..]   (A = dS [q][kv]: the dSᵀ buffer read MN-major (transpose bit,
    // one 64-wide M panel), k16 step = 16 kv rows; B = K MN-major, two panels from d0)
    float acc_dq[kHalfD / 2];
    ptx::warpgroup_fence_operand(acc_dq);
    ptx::warpgroup_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      ptx::warpgroup_mma_ss<kHalfD, kIsBf16, 1, 1>(
          acc_dq, ptx::make_smem_desc_sw128(dst_base, kk * 16 * kRowBytes, kBlockN * kRowBytes, 1024),
          ptx::make_smem_desc_sw128(k_base, (d0 / kPanelCols) * kKVPanelBytes + kk * 16 * kRowBytes, kKVPanelBytes,
                                    1024),
          kk > 0);
    }
    ptx::warpgroup_commit();

    // dV[:, d0..] += Pᵀ·dO[:, d0..], dK[:, d0..] += dSᵀ·Q[:, d0..]   (A K-major: k16 step = 32
    // bytes along the row; B MN-major: dO, Q rows are q = k, two 64-column panels from d0)
    ptx::warpgroup_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk) {
      ptx::warpgroup_mma_ss<kHalfD, kIsBf16, 1>(
          acc_dv, ptx::make_smem_desc_sw128(pt_base, kk * 32, 16, 1024),
          ptx::make_smem_desc_sw128(sdo_base, (d0 / kPanelCols) * kQPanelBytes + kk * 16 * kRowBytes, kQPanelBytes,
                                    1024),
          s > 0 || kk > 0);
    }
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk) {
      ptx::warpgroup_mma_ss<kHalfD, kIsBf16, 1>(
          acc_dk, ptx::make_smem_desc_sw128(dst_base, kk * 32, 16, 1024),
          ptx::make_smem_desc_sw128(sq_base, (d0 / kPanelCols) * kQPanelBytes + kk * 16 * kRowBytes, kQPanelBytes,
                                    1024),
          s > 0 || kk > 0);
    }
    ptx::warpgroup_commit();
    // dQ, dV and dK landed: this warpgroup's columns of the stage's Q and dO are read (the other
    // warpgroup reads only its own columns after ds_ready), and dQ goes over them: rows of 32
    // floats, 16-byte chunks swizzled by row % 8 = g (the dQ accumulator map's box), as consumer.
    ptx::warpgroup_wait<0>();
    ptx::warpgroup_fence_operand(acc_dq);
    ptx::warpgroup_fence_operand(acc_dv);
    ptx::warpgroup_fence_operand(acc_dk);
    // Panels 4·group .. + 3 at dq_panel_offset: consecutive Q and dO panels, not evenly spaced,
    // so one panel at a time.
#pragma unroll
    for (int c = 0; c < kHalfD / kDqPanelCols; ++c)
      store_dq_paired<kDqPanelCols>(smem + dq_panel_offset(stage, 4 * group + c) + (16 * warp + g) * kRowBytes, 0,
                                    reinterpret_cast<const float(&)[kDqPanelCols / 2]>(acc_dq[kDqPanelCols / 2 * c]), g,
                                    t);
    // Generic-proxy writes, read by the writer's bulk reductions (async proxy): fence, arrive.
    ::cuda::ptx::fence_proxy_async(::cuda::ptx::space_shared);
    SmemBarrier{bars + kBarDqFull + stage}.arrive();
  }
  ptx::warpgroup_wait<0>();  // the last step's dV, dK
  ptx::warpgroup_fence_operand(acc_dv);
  ptx::warpgroup_fence_operand(acc_dk);
  epilogue(params, smem_base, smem, bars, w, acc_dk, acc_dv, w.steps > 0, group, 0, d0);
}

}  // namespace fa::cuda::sm90
