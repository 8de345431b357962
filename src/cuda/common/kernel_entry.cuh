// CUDA backend, common/: the one generic __global__ trampoline of every kernel class, and the
// host helpers its launches share. A kernel class supplies Params, kThreads, kMinBlocks and a
// __device__ operator()(params, smem); the trampoline only forwards. Launch configuration lives
// in the class, not here.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

#include "cuda/common/check.h"

namespace fa::cuda {

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, Kernel::kMinBlocks)
    kernel_entry(const __grid_constant__ typename Kernel::Params params) {
  extern __shared__ __align__(128) char smem[];
  Kernel{}(params, smem);
}

}  // namespace fa::cuda

namespace fa::cuda {

// Raises kernel_entry<Kernel>'s dynamic shared-memory limit to `bytes` on the current device,
// once per device (the attribute lasts as long as the device's context), so that launches do
// not pay for the call.
template <class Kernel>
void set_smem_limit_once(int bytes) {
  static std::atomic<uint64_t> done{0};  // bit d: device d is set (devices past 63: every call)
  int device = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return;
  FA_CUDA_CHECK(cudaFuncSetAttribute(&kernel_entry<Kernel>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.fetch_or(bit, std::memory_order_release);
}

// Streaming multiprocessors of the current device (persistent grids).
inline int multiprocessor_count() {
  int device = 0, count = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

}  // namespace fa::cuda
