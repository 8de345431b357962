// CUDA backend, sm80/: definitions of bwd_can_implement / bwd_launch for one head dim, included
// by exactly one bwd_hdim*.cu each (so a head dim compiles on its own). No dispatch here.
#pragma once

#include "cuda/common/check.h"
#include "cuda/common/kernel_entry.cuh"
#include "cuda/sm80/bwd_config.h"
#include "cuda/sm80/bwd_kernel.cuh"

namespace fa::cuda::sm80 {

template <int kHeadDim, bool kIsBf16, bool kCompact>
std::string bwd_can_implement(const BwdParams& p, int smem_optin) {
  return BwdKernel<kHeadDim, kIsBf16, false, kCompact>::can_implement(p, smem_optin);
}

template <class Kernel>
void bwd_launch_kernel(const BwdParams& p, cudaStream_t stream) {
  const auto entry = &kernel_entry<Kernel>;
  constexpr int smem = Kernel::smem_bytes();
  set_smem_limit_once<Kernel>(smem);
  entry<<<Kernel::grid(p), Kernel::block(), smem, stream>>>(p);
  check_launch("sm80 backward");
}

// The deterministic instantiation when the launch has counters (p.locks), else the default one.
template <int kHeadDim, bool kIsBf16, bool kCompact>
void bwd_launch(const BwdParams& p, cudaStream_t stream) {
  if (p.locks != nullptr) bwd_launch_kernel<BwdKernel<kHeadDim, kIsBf16, true, kCompact>>(p, stream);
  else bwd_launch_kernel<BwdKernel<kHeadDim, kIsBf16, false, kCompact>>(p, stream);
}

}  // namespace fa::cuda::sm80

// Explicit instantiation of both 16-bit types for one head dim, full-size or compact tiles.
#define FA_SM80_BWD_INSTANTIATE(D, C)                                         \
  template std::string bwd_can_implement<D, true, C>(const BwdParams&, int);  \
  template std::string bwd_can_implement<D, false, C>(const BwdParams&, int); \
  template void bwd_launch<D, true, C>(const BwdParams&, cudaStream_t);       \
  template void bwd_launch<D, false, C>(const BwdParams&, cudaStream_t);
