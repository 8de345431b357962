// CUDA backend, ptx/: fast special-function instructions used by the softmax.
// One instruction family (MUFU approximations); thin inline-asm wrappers, per-thread scope.
// No algorithm here: callers decide where the approximation error is acceptable.
#pragma once

namespace fa::cuda::ptx {

// ex2.approx.ftz.f32 d, a;   2^a, max relative error 2^-22; -inf -> +0     (sm_20+)
__device__ __forceinline__ float ex2_approx(float a) {
  float d;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(d) : "f"(a));
  return d;
}

// lg2.approx.ftz.f32 d, a;   log2(a), max absolute error 2^-22 near 1; 0 -> -inf (sm_20+)
__device__ __forceinline__ float lg2_approx(float a) {
  float d;
  asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(d) : "f"(a));
  return d;
}

// rcp.approx.ftz.f32 d, a;   1/a, max relative error 2^-23 (1 ulp); inf -> +0       (sm_20+)
__device__ __forceinline__ float rcp_approx(float a) {
  float d;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(d) : "f"(a));
  return d;
}

}  // namespace fa::cuda::ptx
