// CUDA backend, sm80/: tile shapes of the backward main kernel per compiled head dim, and the
// launch entry each bwd_hdim*.cu instantiates. Only constants and declarations: no kernel code.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "cuda/sm80/bwd_params.h"

namespace fa::cuda::sm80 {

// Per head dim: warps, how many warps share one 16-row kv slice (kSplitD: they split dK/dV's
// columns and Sᵀ/dPᵀ's q columns, sharing Pᵀ/dSᵀ through shared memory), kv rows per CTA
// (16 per row group), q rows per inner step, CTAs per SM for the register cap.
// Registers per thread hold dK+dV (2·16·D/split fp32 per warp) plus Sᵀ and dPᵀ (2·16·BM/split).
template <int kHeadDim>
struct BwdConfig;
template <>
struct BwdConfig<64> {  // 65 KiB smem, 2 CTAs/SM (128 regs, no spill); see docs/PERF.md v3
  static constexpr int kWarps = 8, kSplitD = 2, kBlockN = 64, kBlockM = 64, kMinBlocks = 2;
};
template <>
struct BwdConfig<128> {  // 113 KiB smem, 2 CTAs/SM (128 regs, no spill); see docs/PERF.md v3
  static constexpr int kWarps = 8, kSplitD = 2, kBlockN = 64, kBlockM = 64, kMinBlocks = 2;
};
template <>
struct BwdConfig<256> {  // 209 KiB smem, 1 CTA/SM (255 regs); see docs/PERF.md v3
  static constexpr int kWarps = 8, kSplitD = 2, kBlockN = 64, kBlockM = 64, kMinBlocks = 1;
};

template <int kHeadDim>
inline constexpr int kBwdBlockN = BwdConfig<kHeadDim>::kBlockN;
template <int kHeadDim>
inline constexpr int kBwdBlockM = BwdConfig<kHeadDim>::kBlockM;

// Empty string when the main kernel can run p on a device with smem_optin bytes per block.
template <int kHeadDim, bool kIsBf16>
std::string bwd_can_implement(const BwdParams& p, int smem_optin);
// Launches the main kernel on `stream` and checks the launch; throws fa::Error on failure.
template <int kHeadDim, bool kIsBf16>
void bwd_launch(const BwdParams& p, cudaStream_t stream);

}  // namespace fa::cuda::sm80
