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
// q; Q/dO/LSE/D buffers (kQStages: 2 = the next step loads during this one, 1 = after it).
// Registers per thread hold dK+dV (2·kBlockN·D / 256 fp32) plus S and dP (2·kBlockM·kBlockN / 256).
// One CTA per SM: 255 registers and 161–209 KiB of shared memory (Hopper-class; 161 KiB fits an
// A100's 163); see docs/PERF.md v4. kCompact: the tiles for less shared memory, chosen when the
// device has too little for the first: 97 KiB (64) and 81 KiB (128) fit the 99 KiB of sm86, sm89
// and sm120 GPUs, 145 KiB (256) an A100's.
template <int kHeadDim, bool kCompact = false>
struct BwdConfig;
template <>
struct BwdConfig<64> {  // warp tiles: S/dP 32 x 64, dK/dV 32 x 32, dQ 32 x 32
  static constexpr int kBlockM = 128, kBlockN = 128, kSdpWarpsM = 4, kDkvWarpsN = 4, kDqWarpsM = 4, kQStages = 2;
};
template <>
struct BwdConfig<128> {  // warp tiles: S/dP 32 x 32, dK/dV 32 x 64, dQ 32 x 32
  static constexpr int kBlockM = 64, kBlockN = 128, kSdpWarpsM = 2, kDkvWarpsN = 4, kDqWarpsM = 2, kQStages = 2;
};
template <>
struct BwdConfig<256> {  // warp tiles: S/dP 16 x 32, dK/dV 32 x 64, dQ 32 x 64
  static constexpr int kBlockM = 64, kBlockN = 64, kSdpWarpsM = 4, kDkvWarpsN = 2, kDqWarpsM = 2, kQStages = 2;
};
template <>
struct BwdConfig<64, true> {  // warp tiles: S/dP 32 x 32, dK/dV 32 x 32, dQ 16 x 32
  static constexpr int kBlockM = 64, kBlockN = 128, kSdpWarpsM = 2, kDkvWarpsN = 4, kDqWarpsM = 4, kQStages = 2;
};
template <>
struct BwdConfig<128, true> {  // warp tiles: S/dP 16 x 32, dK/dV 32 x 32, dQ 32 x 32
  static constexpr int kBlockM = 64, kBlockN = 64, kSdpWarpsM = 4, kDkvWarpsN = 2, kDqWarpsM = 2, kQStages = 1;
};
template <>
struct BwdConfig<256, true> {  // as BwdConfig<256> with one Q/dO buffer
  static constexpr int kBlockM = 64, kBlockN = 64, kSdpWarpsM = 4, kDkvWarpsN = 2, kDqWarpsM = 2, kQStages = 1;
};

template <int kHeadDim, bool kCompact = false>
inline constexpr int kBwdBlockN = BwdConfig<kHeadDim, kCompact>::kBlockN;
template <int kHeadDim, bool kCompact = false>
inline constexpr int kBwdBlockM = BwdConfig<kHeadDim, kCompact>::kBlockM;
template <int kHeadDim, bool kCompact = false>
inline constexpr int kBwdDqWarpsM = BwdConfig<kHeadDim, kCompact>::kDqWarpsM;

// Empty string when the main kernel can run p on a device with smem_optin bytes per block.
template <int kHeadDim, bool kIsBf16, bool kCompact = false>
std::string bwd_can_implement(const BwdParams& p, int smem_optin);
// Launches the main kernel on `stream` and checks the launch; throws fa::Error on failure.
template <int kHeadDim, bool kIsBf16, bool kCompact = false>
void bwd_launch(const BwdParams& p, cudaStream_t stream);

}  // namespace fa::cuda::sm80
