// CUDA backend, sm90/: tile shapes of the Hopper forward kernel per compiled head dim, and the
// launch entry each fwd_hdim*.cu instantiates. Only constants and declarations: no kernel code.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "cuda/sm80/fwd_params.h"

namespace fa::cuda::sm90 {

#ifdef FA_SM90_FWD_OVERLAP
#define FA_SM90_OVERLAP(x) (FA_SM90_FWD_OVERLAP != 0)
#else
#define FA_SM90_OVERLAP(x) x
#endif
#ifdef FA_SM90_FWD_PINGPONG
#define FA_SM90_PINGPONG(x) (FA_SM90_FWD_PINGPONG != 0)
#else
#define FA_SM90_PINGPONG(x) x
#endif

// Varlen (packed sequences, cu_seqlens) in the sm90 forward, its own kernel instantiation (the
// dense kernels are untouched). On by default; building with FA_SM90_FWD_VARLEN=0 sends varlen
// problems to sm80 (for timing one against the other).
#ifdef FA_SM90_FWD_VARLEN
inline constexpr bool kSm90FwdVarlen = FA_SM90_FWD_VARLEN != 0;
#else
inline constexpr bool kSm90FwdVarlen = true;
#endif

// Per head dim: query rows per CTA (64 per consumer warpgroup: two or three of them), keys per
// K/V block, K/V stages, kOverlap (intra-warpgroup overlap of Q·K_{j+1}ᵀ and P_j·V_j with the
// softmax) and kPingPong (the consumer warpgroups take turns issuing their GEMMs, so one's
// softmax runs under the others' GEMMs). The compile definitions FA_SM90_FWD_OVERLAP /
// FA_SM90_FWD_PINGPONG (0 or 1) override both for every head dim, for timing the schedules
// against each other (docs/PERF.md). Shared memory = (Q buffers + O buffer)·BM·D·2 + 2·stages·BN·D·2
// bytes + barriers and tile slots (fwd_kernel.cuh).
// Shapes follow the FlashAttention-3 design (BM 192 at D 64, else 128; BN 128 up to D 128, 80 at
// D 256); the schedules chosen here are the fastest timed on the H200 (docs/PERF.md, "GPU
// forward (sm90 path)").
// Rows: a head dim may have more than one row (kRow 0, 1, ...), each its own kernel; row r hands
// the masked problems of fewer than kNextRowMaskedBelow query rows and the problems of fewer
// than kNextRowKeysBelow keys to row r + 1 (0: none; kEveryMasked: all masked problems), and the
// last row takes what reaches it. At 64 the second row has smaller tiles (a 192-row tile cuts
// the diagonal coarsely and leaves fewer tiles than multiprocessors: the 192-row kernel lost 6%
// at causal 1k, gained 4–5% at 2k, docs/PERF.md) and no ping-pong (+1–2% on its short masked
// tiles); at 128 and 256 it has the same tiles and runs the
// whole softmax after the P·V's wait (kRowsUnderPv 0), which is faster on short tiles and
// masked blocks; at 256 a third row runs 64-key blocks for at most 1024 keys
// (80-key blocks pad 512 keys to 560, and that row has room to stage O apart from Q).
// kUniformGroup: the consumers read their warpgroup index through warp_uniform (fwd_kernel.cuh):
// +1–4% at hdim 64, and at 256 it lets the overlapped schedule fit (spills 156 → 84 bytes;
// +4–11%), but −1–3% at 128 (docs/PERF.md). kNextS: the overlapped schedule issues the next
// tile's first Q·Kᵀ right after a tile's last P·V, under the epilogue (fwd_kernel.cuh): +3–6% at
// hdim 64 (and +3% at non-causal 512 once the P·V no longer waited for that Q·Kᵀ's keys), −1–5%
// at 128, where the epilogue then waits for the next tile's first K block to arrive.
// kRowsUnderPv: how many of each thread's two rows of the softmax run under the P·V in flight
// (fwd_kernel.cuh): 2 at 128 and 1 at 256 gave +2–3% and +4–6% on unmasked problems from 4096
// and 2048 keys, but −1–7% on short or masked ones; the 192-row kernel spills with it.
// kVarlenRowsUnderPv: the same for the row's varlen instantiation. At 256 that kernel, with every
// mask and softcap pass, read 2 values a key block from local memory with one row under the P·V;
// with none it is the second row's varlen kernel.
// kSplitProducer: K and V loaded by two producer threads (fwd_kernel.cuh), so that a V stage
// released late holds back no K load: +2–6% on short and causal problems at 64 and 128 (the
// second rows), −1% at 128 and −3 to −7% at 256 on long unmasked ones (docs/PERF.md).
// kTail: what a tile does with its 64-row slices that lie wholly past the sequence (the last q
// block of a length that is no multiple of kBlockM: of the 192-row tiles at every length of the
// grid, 1024 = 5·192 + 64): kTailCompute computes them and drops the rows; kTailIdle lets their
// warpgroups skip the tile's GEMMs (fwd_kernel.cuh, consumer_idle); kTailSplit also deals the key
// blocks of a tile with one slice in the sequence over all the warpgroups, which then combine
// their partial softmax and O (consumer_split). Only the split pays: a warpgroup's tile takes
// about as long alone as beside the others (the hdim-64 consumers are latency-bound), so idle
// slices alone save no time (kTailIdle is what the split falls back on where a tile has fewer
// key blocks than warpgroups, or two slices left). Elsewhere the tail code costs the other
// tiles (spills 20 -> 76 bytes at 128; at 256 −3 to −5% on long unmasked problems), and the
// tiles there compute their tails (docs/PERF.md).
inline constexpr int kEveryMasked = 1 << 30;
inline constexpr int kTailCompute = 0, kTailIdle = 1, kTailSplit = 2;
template <int kHeadDim, int kRow = 0>
struct FwdConfig;
template <>
struct FwdConfig<64> {  // 137 KiB (O staged apart), three consumer warpgroups
  static constexpr int kBlockM = 192, kBlockN = 128, kStages = 2;
  static constexpr bool kOverlap = FA_SM90_OVERLAP(true);
  static constexpr bool kPingPong = FA_SM90_PINGPONG(true);
  static constexpr int kNextRowMaskedBelow = 2048, kNextRowKeysBelow = 0;
  static constexpr bool kUniformGroup = true;
  static constexpr bool kNextS = true;
  static constexpr int kRowsUnderPv = 0, kVarlenRowsUnderPv = 0;
  static constexpr bool kSplitProducer = false;
  static constexpr int kTail = kTailSplit;
};
template <>
struct FwdConfig<64, 1> {  // 113 KiB (O staged apart), two consumer warpgroups
  static constexpr int kBlockM = 128, kBlockN = 128, kStages = 2;
  static constexpr bool kOverlap = FA_SM90_OVERLAP(true);
  static constexpr bool kPingPong = FA_SM90_PINGPONG(false);  // its short masked tiles: +1–2% without
  static constexpr int kNextRowMaskedBelow = 0, kNextRowKeysBelow = 0;
  static constexpr bool kUniformGroup = true;
  static constexpr bool kNextS = true;
  static constexpr int kRowsUnderPv = 0, kVarlenRowsUnderPv = 0;
  static constexpr bool kSplitProducer = true;
  static constexpr int kTail = kTailCompute;
};
template <int kRow>
struct FwdConfig<128, kRow> {  // 225 KiB (O staged apart)
  static_assert(kRow == 0 || kRow == 1, "two rows at 128");
  static constexpr int kBlockM = 128, kBlockN = 128, kStages = 2;
  static constexpr bool kOverlap = FA_SM90_OVERLAP(true);
  static constexpr bool kPingPong = FA_SM90_PINGPONG(true);
  static constexpr int kNextRowMaskedBelow = kRow == 0 ? kEveryMasked : 0;
  static constexpr int kNextRowKeysBelow = kRow == 0 ? 4096 : 0;
  static constexpr bool kUniformGroup = false;
  static constexpr bool kNextS = false;
  static constexpr int kRowsUnderPv = kRow == 0 ? 2 : 0, kVarlenRowsUnderPv = kRowsUnderPv;
  static constexpr bool kSplitProducer = kRow == 1;
  static constexpr int kTail = kTailCompute;
};
template <int kRow>
struct FwdConfig<256, kRow> {  // 225 KiB (O staged in the one Q buffer); 193 KiB with 64-key blocks
  static_assert(kRow >= 0 && kRow <= 2, "three rows at 256");
  static constexpr int kBlockM = 128, kBlockN = kRow == 2 ? 64 : 80, kStages = 2;
  static constexpr bool kOverlap = FA_SM90_OVERLAP(true);
  static constexpr bool kPingPong = FA_SM90_PINGPONG(false);
  static constexpr int kNextRowMaskedBelow = kRow == 0 ? kEveryMasked : 0;
  static constexpr int kNextRowKeysBelow = kRow == 0 ? 2048 : kRow == 1 ? 1025 : 0;
  static constexpr bool kUniformGroup = true;
  static constexpr bool kNextS = false;
  static constexpr int kRowsUnderPv = kRow == 0 ? 1 : 0, kVarlenRowsUnderPv = 0;
  static constexpr bool kSplitProducer = false;
  static constexpr int kTail = kTailCompute;
};

// Lazy rescaling in the overlapped consumer (fwd_kernel.cuh, warp_softmax_deferred): a row's
// running maximum moves only when a block raises it past 2^8 in P's scale, and a warp none of
// whose rows moved skips O·alpha. At 256 (O is 128 registers a thread against 40 of S) +2.7% in
// geometric mean over the grid; ±1% at 128. At 64 −1% while the 192-row kernel spilled in its
// key loop, +0.9% on the spill-free own-passes kernels (kFwdOwnPasses; docs/PERF.md).
template <int kHeadDim>
inline constexpr bool kFwdLazyRescale = kHeadDim == 256 || kHeadDim == 64;

// Problems without a softcap, dense or causal, on instantiations of their own passes
// (FwdKernel::kPasses, common/mask.cuh: no softcap pass; only the keys' end, or the causal mask
// as a constant), where kFwdOwnPasses says (fwd_launch picks them, for varlen problems too).
// At 64 the general passes' code made the 192-row kernel spill inside its key loop (none without
// it); at 128 and 256 a shorter dense loop was scheduled worse, −2 to −5% (docs/PERF.md).
template <int kHeadDim>
inline constexpr bool kFwdOwnPasses = kHeadDim == 64;

template <int kHeadDim, int kRow = 0>
inline constexpr int kFwdBlockM = FwdConfig<kHeadDim, kRow>::kBlockM;

// Empty string when the kernel can run p on a device with smem_optin bytes per block (the
// problem fields only; the tensor maps are built by fwd_launch).
template <int kHeadDim, bool kIsBf16, int kRow = 0>
std::string fwd_can_implement(const sm80::FwdParams& p, int smem_optin);
// Builds the tensor maps, launches the kernel on `stream` and checks the launch.
template <int kHeadDim, bool kIsBf16, int kRow = 0>
void fwd_launch(const sm80::FwdParams& p, cudaStream_t stream);

}  // namespace fa::cuda::sm90
