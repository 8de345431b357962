// CUDA backend, sm90/: tile shapes of the Hopper backward main kernel per compiled head dim, and
// the launch entry each bwd_hdim*.cu instantiates. Only constants and declarations: no kernel
// code, no dispatch (launch/kernel_table.h holds the rows).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "cuda/sm80/bwd_params.h"

namespace fa::cuda::sm90 {

// Per head dim: kv rows per CTA (64 per consumer warpgroup, stationary), query rows per streamed
// step, Q/dO stages, whether a step's dK GEMM runs on into the next step, and whether the dQ
// tile is handed to the writer in the next step (BwdKernel::kDqArriveLate). Registers per
// consumer thread (240 after setmaxnreg) hold dK and dV (2·kHeadDim/2 fp32) plus Sᵀ and dPᵀ
// (2·kBlockM/2) for the warpgroup's 64 kv rows; the dQ tile (64 x 64, 32 fp32) comes after
// Sᵀ/dPᵀ are dead. Running dK on needs the dSᵀ fragments (kBlockM/4) beside Sᵀ and dPᵀ: fits at
// D 128, BM 64; at D 64, BM 128 ptxas serialises the wgmma for want of registers. Shared
// memory = (2·BN + 2·stages·BM)·D·2 (K, V, Q, dO) + 2·BM·BN·2 (dS, double-buffered) + BM·D·4
// (the fp32 dQ tile) + stages·BM·8. Shapes follow the FlashAttention-3 design (BN 128; BM 128
// at D 64, 64 at D 128). D 256 (dK + dV would be 256 fp32 a thread) runs split-D: BN = BM = 64,
// the two warpgroups halve the head dim (BwdKernel::kSplitD).
template <int kHeadDim>
struct BwdConfig;
template <>
struct BwdConfig<64> {  // 195 KiB (199,888 B with alignment, work slots and barriers)
  static constexpr int kBlockN = 128, kBlockM = 128, kStages = 2;
  static constexpr bool kDkAcrossSteps = false;
  static constexpr bool kDqArriveLate = true;  // +1..4% here; at 128 −3..+1%
};
template <>
struct BwdConfig<128> {  // 194 KiB (198,864 B)
  static constexpr int kBlockN = 128, kBlockM = 64, kStages = 2;
  static constexpr bool kDkAcrossSteps = true;
  static constexpr bool kDqArriveLate = false;
};

template <>
struct BwdConfig<256> {  // 226 KiB (231,648 B)
  static constexpr int kBlockN = 64, kBlockM = 64, kStages = 2;
  static constexpr bool kDkAcrossSteps = false;
  static constexpr bool kDqArriveLate = false;  // split-D: the dQ tile goes over the Q/dO stage
};

template <int kHeadDim>
inline constexpr int kBwdBlockN = BwdConfig<kHeadDim>::kBlockN;
template <int kHeadDim>
inline constexpr int kBwdBlockM = BwdConfig<kHeadDim>::kBlockM;

// Empty string when the kernel can run p on a device with smem_optin bytes per block (checks the
// problem fields and builds the tensor maps to validate them); else the reason (dispatch then
// falls back to sm80).
template <int kHeadDim, bool kIsBf16>
std::string bwd_can_implement(const sm80::BwdParams& p, int smem_optin);
// Builds the tensor maps, launches the main kernel on `stream` and checks the launch.
template <int kHeadDim, bool kIsBf16>
void bwd_launch(const sm80::BwdParams& p, cudaStream_t stream);

}  // namespace fa::cuda::sm90
