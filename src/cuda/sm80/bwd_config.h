// CUDA backend, sm80/: tile shapes of the backward main kernel per compiled head dim, and the
// launch entry each bwd_hdim*.cu instantiates. Only constants and declarations: no kernel code.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "cuda/sm80/bwd_params.h"

namespace fa::cuda::sm80 {

// Per head dim: q rows per inner step and kv rows per CTA, and how the 8 warps tile the three
// GEMM shapes (the rest of each warp grid follows): S/dP [kBlockM, kBlockN] split kSdpWarpsM
// ways along q, dK/dV [kBlockN, D] kDkvWarpsN ways along kv, dQ [kBlockM, D] kDqWarpsM ways along
// q. Registers per thread hold dK+dV (2·kBlockN·D / 256 fp32) plus S and dP (2·kBlockM·kBlockN / 256).
// One CTA per SM: 255 registers and 161–209 KiB of shared memory; see docs/PERF.md v4.
template <int kHeadDim>
struct BwdConfig;
template <>
struct BwdConfig<64> {  // warp tiles: S/dP 32 x 64, dK/dV 32 x 32, dQ 32 x 32
  static constexpr int kBlockM = 128, kBlockN = 128, kSdpWarpsM = 4, kDkvWarpsN = 4, kDqWarpsM = 4;
};
template <>
struct BwdConfig<128> {  // warp tiles: S/dP 32 x 32, dK/dV 32 x 64, dQ 32 x 32
  static constexpr int kBlockM = 64, kBlockN = 128, kSdpWarpsM = 2, kDkvWarpsN = 4, kDqWarpsM = 2;
};
template <>
struct BwdConfig<256> {  // warp tiles: S/dP 16 x 32, dK/dV 32 x 64, dQ 32 x 64
  static constexpr int kBlockM = 64, kBlockN = 64, kSdpWarpsM = 4, kDkvWarpsN = 2, kDqWarpsM = 2;
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
