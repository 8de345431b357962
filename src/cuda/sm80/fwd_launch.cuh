// CUDA backend, sm80/: definitions of fwd_can_implement / fwd_launch for one head dim, included
// by exactly one fwd_hdim*.cu each (so a head dim compiles on its own). No dispatch here.
#pragma once

#include "cuda/common/check.h"
#include "cuda/common/kernel_entry.cuh"
#include "cuda/sm80/fwd_config.h"
#include "cuda/sm80/fwd_kernel.cuh"

namespace fa::cuda::sm80 {

template <int kHeadDim, bool kIsBf16, bool kCompact, class C = FwdConfig<kHeadDim, kCompact>>
using FwdKernelFor = FwdKernel<kHeadDim, C::kBlockM, C::kBlockN, C::kWarps, C::kStages, C::kMinBlocks,
                               C::kSplit, kIsBf16>;

template <int kHeadDim, bool kIsBf16, bool kCompact>
std::string fwd_can_implement(const FwdParams& p, int smem_optin) {
  return FwdKernelFor<kHeadDim, kIsBf16, kCompact>::can_implement(p, smem_optin);
}

template <int kHeadDim, bool kIsBf16, bool kCompact>
void fwd_launch(const FwdParams& p, cudaStream_t stream) {
  using Kernel = FwdKernelFor<kHeadDim, kIsBf16, kCompact>;
  const auto entry = &kernel_entry<Kernel>;
  const int smem = Kernel::smem_bytes();
  set_smem_limit_once<Kernel>(smem);
  entry<<<Kernel::grid(p), Kernel::block(), smem, stream>>>(p);
  check_launch("sm80 forward");
}

}  // namespace fa::cuda::sm80

// Explicit instantiation of both 16-bit types for one head dim, full-size or compact tiles.
#define FA_SM80_FWD_INSTANTIATE(D, C)                                          \
  template std::string fwd_can_implement<D, true, C>(const FwdParams&, int);  \
  template std::string fwd_can_implement<D, false, C>(const FwdParams&, int); \
  template void fwd_launch<D, true, C>(const FwdParams&, cudaStream_t);       \
  template void fwd_launch<D, false, C>(const FwdParams&, cudaStream_t);
