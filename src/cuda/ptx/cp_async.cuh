// CUDA backend, ptx/: asynchronous global-to-shared copies (cp.async) and their groups.
// One instruction family; thin inline-asm wrappers, per-thread scope (each thread waits
// for its own groups; a CTA barrier is still needed before others read the data).
#pragma once

#include <cstdint>

namespace fa::cuda::ptx {

// cp.async.cg.shared.global [dst], [src], 16, src_size;                  (sm_80+)
// Copies 16 bytes, bypassing L1; bytes past src_size (0 or 16 here) are zero-filled, so
// src_size = 0 writes 16 zero bytes and reads nothing (src must still be a valid address).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_size));
}

// cp.async.cg.shared.global [dst], [src], 16;   the same, all 16 bytes read    (sm_80+)
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

// cp.async.ca.shared.global [dst], [src], cp_size, src_size;  cp_size 4/8 (sm_80+)
__device__ __forceinline__ void cp_async_8(uint32_t dst, const void* src, bool valid) {
  const int src_size = valid ? 8 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_size));
}
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool valid) {
  const int src_size = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_size));
}

// cp.async.commit_group;                                                 (sm_80+)
// Closes the group of this thread's cp.async issued since the last commit (may be empty).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// cp.async.wait_group N;                                                 (sm_80+)
// Waits until at most N of this thread's committed groups are still pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// cp.async.wait_all;                                                     (sm_80+)
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::); }

}  // namespace fa::cuda::ptx
