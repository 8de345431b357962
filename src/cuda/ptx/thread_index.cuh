// CUDA backend, ptx/: threadIdx.x read anew where it is used. A thin inline-asm wrapper: what a
// kernel derives from the value (a fragment's row or column, an stmatrix address) is computed
// there, not hoisted out of a loop by ptxas and held in a register, or spilled, across it.
#pragma once

namespace fa::cuda::ptx {

// mov.u32 %r, %tid.x;   volatile, so each call reads the special register again
__device__ __forceinline__ int thread_index_anew() {
  int x;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(x));
  return x;
}

}  // namespace fa::cuda::ptx
