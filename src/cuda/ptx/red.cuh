// CUDA backend, ptx/: global-memory reductions and the acquire/release flag accesses that
// order them (red, ld.acquire). One instruction family; thin inline-asm wrappers, per-thread
// scope. No algorithm here: callers decide which addresses and which order.
#pragma once

#include <cstdint>

namespace fa::cuda::ptx {

// red.relaxed.gpu.global.add.v2.f32 [addr], {a, b};                       (sm_90+)
// Below sm_90: two red.global.add.f32 (sm_20+). addr must be 8-byte aligned.
__device__ __forceinline__ void red_add_f32x2(float* addr, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.relaxed.gpu.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(addr), "f"(a), "f"(b)
               : "memory");
#else
  asm volatile("red.relaxed.gpu.global.add.f32 [%0], %1;\n" ::"l"(addr), "f"(a) : "memory");
  asm volatile("red.relaxed.gpu.global.add.f32 [%0], %1;\n" ::"l"(addr + 1), "f"(b) : "memory");
#endif
}

// The same under a PTX predicate (@p red ...). ptxas may still branch around it (it does in the
// sm80 backward, whose measured schedule uses this form; a C++ `if` there compiles differently).
__device__ __forceinline__ void red_add_f32x2_if(bool pred, float* addr, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n"
      " @p red.relaxed.gpu.global.add.v2.f32 [%0], {%1, %2};\n}\n" ::"l"(addr),
      "f"(a), "f"(b), "r"(int(pred))
      : "memory");
#else
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n"
      " @p red.relaxed.gpu.global.add.f32 [%0], %1;\n @p red.relaxed.gpu.global.add.f32 [%0+4], %2;\n}\n" ::"l"(
          addr),
      "f"(a), "f"(b), "r"(int(pred))
      : "memory");
#endif
}

// ld.acquire.gpu.global.b32 d, [addr];                                     (sm_70+)
__device__ __forceinline__ int ld_acquire_gpu(const int* addr) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(addr) : "memory");
  return v;
}

// atom.acquire.gpu.global.add.s32 d, [addr], v;                           (sm_70+)
// Returns the value before the addition.
__device__ __forceinline__ int atom_acquire_add_gpu(int* addr, int v) {
  int old;
  asm volatile("atom.acquire.gpu.global.add.s32 %0, [%1], %2;\n" : "=r"(old) : "l"(addr), "r"(v) : "memory");
  return old;
}

// red.release.gpu.global.add.s32 [addr], v;                                (sm_70+)
__device__ __forceinline__ void red_release_add_gpu(int* addr, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(addr), "r"(v) : "memory");
}

}  // namespace fa::cuda::ptx
