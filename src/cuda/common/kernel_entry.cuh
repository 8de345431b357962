// CUDA backend, common/: the one generic __global__ trampoline of every kernel class.
// A kernel class supplies Params, kThreads, kMinBlocks and a __device__ operator()(params, smem);
// the trampoline only forwards. Launch configuration lives in the class, not here.
#pragma once

namespace fa::cuda {

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, Kernel::kMinBlocks)
    kernel_entry(const __grid_constant__ typename Kernel::Params params) {
  extern __shared__ __align__(128) char smem[];
  Kernel{}(params, smem);
}

}  // namespace fa::cuda
