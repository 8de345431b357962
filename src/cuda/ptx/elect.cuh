// CUDA backend, ptx/: one lane of a warp chosen without a lane index (elect.sync). A thin inline-asm
// wrapper: a loop's "if (lane == 0)" then needs no register holding the lane across the loop.
#pragma once

#include <cstdint>

namespace fa::cuda::ptx {

// elect.sync _|p, 0xffffffff;   true in one lane of the warp (every lane must call it together,
// converged)                                                                            (sm_90+)
__device__ __forceinline__ bool warp_elect_one() {
  uint32_t elected;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "elect.sync _|p, 0xffffffff;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(elected));
  return elected != 0;
}

}  // namespace fa::cuda::ptx
