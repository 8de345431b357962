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

// Per head dim: query rows per CTA (64 per consumer warpgroup), keys per K/V block, K/V stages,
// kOverlap (intra-warpgroup overlap of Q·K_{j+1}ᵀ and P_j·V_j with the softmax) and kPingPong
// (the two consumer warpgroups take turns issuing their GEMMs, so one's softmax runs under the
// other's GEMMs). The compile definitions FA_SM90_FWD_OVERLAP / FA_SM90_FWD_PINGPONG (0 or 1)
// override both for every head dim, for timing the schedules against each other (docs/PERF.md).
// Shared memory = (BM + 2·stages·BN)·D·2 bytes + barriers. Shapes follow the FlashAttention-3
// design (BM 128; BN 128 up to D 128, 64 at D 256); the schedules chosen here are the fastest
// of the four timed on the H200 (docs/PERF.md, "GPU forward (sm90 path)").
template <int kHeadDim>
struct FwdConfig;
template <>
struct FwdConfig<64> {  // 80 KiB
  static constexpr int kBlockM = 128, kBlockN = 128, kStages = 2;
  static constexpr bool kOverlap = FA_SM90_OVERLAP(true);
  static constexpr bool kPingPong = FA_SM90_PINGPONG(true);
};
template <>
struct FwdConfig<128> {  // 160 KiB
  static constexpr int kBlockM = 128, kBlockN = 128, kStages = 2;
  static constexpr bool kOverlap = FA_SM90_OVERLAP(true);
  static constexpr bool kPingPong = FA_SM90_PINGPONG(true);
};
template <>
struct FwdConfig<256> {  // 225 KiB
  static constexpr int kBlockM = 128, kBlockN = 80, kStages = 2;
  static constexpr bool kOverlap = FA_SM90_OVERLAP(false);
  static constexpr bool kPingPong = FA_SM90_PINGPONG(false);
};

template <int kHeadDim>
inline constexpr int kFwdBlockM = FwdConfig<kHeadDim>::kBlockM;

// Empty string when the kernel can run p on a device with smem_optin bytes per block (the
// problem fields only; the tensor maps are built by fwd_launch).
template <int kHeadDim, bool kIsBf16>
std::string fwd_can_implement(const sm80::FwdParams& p, int smem_optin);
// Builds the tensor maps, launches the kernel on `stream` and checks the launch.
template <int kHeadDim, bool kIsBf16>
void fwd_launch(const sm80::FwdParams& p, cudaStream_t stream);

}  // namespace fa::cuda::sm90
