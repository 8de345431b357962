// CUDA backend, sm80/: tile shapes of the forward kernel per compiled head dim, and the launch
// entry each fwd_hdim*.cu instantiates. Only constants and declarations: no kernel code.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "cuda/sm80/fwd_params.h"

namespace fa::cuda::sm80 {

// Per head dim: query rows per CTA, keys per block, warps, K/V buffers (kStages: 1 = one K and
// one V buffer refilled alternately, >= 2 = a ring of K/V pairs), CTAs per SM the register budget
// is sized for (__launch_bounds__), warps sharing a set of rows (kSplit: 1 = each warp alone,
// 2 = pairs splitting S's keys and O's columns). Shared memory = (BM + 2·stages·BN)·D·2 bytes,
// plus 2.5 KiB a warp when paired. The comments give the H200 measurement (docs/PERF.md, "GPU
// forward") that chose each row over its rivals. kCompact: the tiles for devices with less shared
// memory than the first needs (only D = 256 has them: 96 KiB fit the 99 KiB of sm86/89/120).
template <int kHeadDim, bool kCompact = false>
struct FwdConfig;
// Rows per warp: 32 (2 m16 tiles) lets each K/V fragment read from shared memory feed 2 mmas.
// D = 256 cannot hold 2 tiles of O (128 registers each) in one warp: a pair holds 32 rows, each
// warp half of O's columns.
template <>
struct FwdConfig<64> {  // 48 KiB; stages 2 beat 1 by 6-12% on every grid cell, 3 by +-1% (noise)
  static constexpr int kBlockM = 128, kBlockN = 64, kWarps = 4, kStages = 2, kMinBlocks = 2, kSplit = 1;
};
template <>
struct FwdConfig<128> {  // 64 KiB; stages 1 vs 2: +11% at 4k/8k non-causal, -3% at 512, +-2% else
  static constexpr int kBlockM = 128, kBlockN = 64, kWarps = 4, kStages = 1, kMinBlocks = 2, kSplit = 1;
};
template <>
struct FwdConfig<256> {  // 106 KiB, 2 CTAs/SM; the same tiles unpaired (16 rows a warp): 4-9% slower
  // from 4k, equal below; 128 x 64 x 8 warps with a ring of 2 (192 KiB, 1 CTA/SM): 5-17% slower
  static constexpr int kBlockM = 64, kBlockN = 64, kWarps = 4, kStages = 1, kMinBlocks = 2, kSplit = 2;
};
template <>
struct FwdConfig<256, true> {  // 96 KiB: the tiles above unpaired (16 rows a warp, no exchange area)
  static constexpr int kBlockM = 64, kBlockN = 64, kWarps = 4, kStages = 1, kMinBlocks = 2, kSplit = 1;
};

// Query rows per CTA of the kernel that serves kHeadDim (sizes the grid and num_m_blocks).
template <int kHeadDim, bool kCompact = false>
inline constexpr int kFwdBlockM = FwdConfig<kHeadDim, kCompact>::kBlockM;

// Empty string when the kernel can run p on a device with smem_optin bytes per block.
template <int kHeadDim, bool kIsBf16, bool kCompact = false>
std::string fwd_can_implement(const FwdParams& p, int smem_optin);
// Launches the kernel on `stream` and checks the launch; throws fa::Error on failure.
template <int kHeadDim, bool kIsBf16, bool kCompact = false>
void fwd_launch(const FwdParams& p, cudaStream_t stream);

}  // namespace fa::cuda::sm80
