// CUDA backend, ptx/: per-warpgroup register reallocation (setmaxnreg).
// One instruction family; thin inline-asm wrappers, warpgroup:: scope (every thread of the
// warpgroup executes the same one). Needs sm_90a and a register cap at kernel entry
// (__launch_bounds__(threads, 1)); the compiler warns (C7508) when it has to ignore it.
#pragma once

namespace fa::cuda::ptx {

// setmaxnreg.inc.sync.aligned.u32 imm-reg-count;   (sm_90a; count a multiple of 8 in 24..256)
// Blocks until the pool holds enough released registers.
template <int kRegs>
__device__ __forceinline__ void warpgroup_reg_alloc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg count");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// setmaxnreg.dec.sync.aligned.u32 imm-reg-count;   (sm_90a; count a multiple of 8 in 24..256)
// Releases the registers above kRegs back to the CTA's pool.
template <int kRegs>
__device__ __forceinline__ void warpgroup_reg_dealloc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg count");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

}  // namespace fa::cuda::ptx
